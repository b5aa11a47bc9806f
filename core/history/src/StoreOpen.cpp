// Opening a history database: refusing what is not ours or newer, read-only and immutable
// opens, WAL setup, schema migration, and marking runs of dead writers incomplete.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "Impl.hpp"
#include "ProcessProbe.hpp"
#include "Schema.hpp"

namespace pipestudio::history {

using detail::exec;
using detail::Statement;

namespace {
// A read-only open of a WAL database needs its -shm file; on a read-only mount without one,
// SQLite cannot open it at all. Nobody can write there either, so it is opened immutable.
int openReadOnly(const std::string& path, sqlite3** db, int extraFlags = 0) {
  int rc = sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READONLY | extraFlags, nullptr);
  if (rc == SQLITE_OK) {
    rc = sqlite3_exec(*db, "SELECT COUNT(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return rc;
  }
  if (::access(path.c_str(), W_OK) == 0 && ::access(std::filesystem::path(path).parent_path().c_str(), W_OK) == 0) {
    return rc;  // writable: the failure is not a read-only mount
  }
  sqlite3_close(*db);
  *db = nullptr;
  std::string uri = "file:";
  for (const char c : std::filesystem::absolute(path).string()) {
    if (c == '?' || c == '#' || c == '%') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      uri += buf;
    } else {
      uri += c;
    }
  }
  return sqlite3_open_v2((uri + "?immutable=1").c_str(), db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | extraFlags,
                         nullptr);
}
}  // namespace

Expected<HistoryStore> HistoryStore::open(const std::string& path, const OpenOptions& options) {
  namespace fs = std::filesystem;
  if (options.targetSchemaVersion < 1 || options.targetSchemaVersion > kSchemaVersion) {
    return Error{"schema version " + std::to_string(options.targetSchemaVersion) + " is not one this build can create"};
  }
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  // Inspect an existing file read-only first: a newer schema must be refused before anything
  // (WAL switch, migration, recovery) could write to it.
  if (exists) {
    detail::Connection probe;
    const int rc = openReadOnly(path, probe.receive());
    if (rc != SQLITE_OK) {
      std::string m = probe ? sqlite3_errmsg(probe) : "out of memory";
      if (rc == SQLITE_NOTADB) return Error{withPath(path, "not a PipeStudio history database (" + m + ")")};
      return Error{withPath(path, "cannot open history database: " + m)};
    }
    sqlite3_busy_timeout(probe, options.busyTimeoutMs);
    auto version = detail::queryInt(probe, "PRAGMA user_version");
    auto appId = detail::queryInt(probe, "PRAGMA application_id");
    probe = {};
    if (!version) {
      return Error{withPath(path, "not a PipeStudio history database (" + version.message() + ")")};
    }
    if (appId && *appId != 0 && *appId != detail::kApplicationId) {
      return Error{withPath(path, "not a PipeStudio history database (SQLite application_id " + std::to_string(*appId) +
                                      "); choose another file with --db")};
    }
    if (*version > kSchemaVersion) {
      return Error{withPath(path, "history database has schema version " + std::to_string(*version) +
                                      ", newer than this build supports (" + std::to_string(kSchemaVersion) +
                                      "); it was written by a newer PipeStudio. Upgrade PipeStudio or choose another "
                                      "file with --db. The file was not modified.")};
    }
    if (*version == 0 && appId && *appId == 0) {
      // A SQLite file we did not create: only an empty one is adopted.
      detail::Connection check;
      if (sqlite3_open_v2(path.c_str(), check.receive(), SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        auto tables = detail::queryInt(check, "SELECT COUNT(*) FROM sqlite_schema");
        check = {};
        if (tables && *tables > 0) {
          return Error{withPath(path,
                                "not a PipeStudio history database (a SQLite file with other tables); choose "
                                "another file with --db")};
        }
      }
    }
  } else if (options.readOnly) {
    return Error{withPath(path, "no history database here")};
  } else {
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec) return Error{withPath(path, "cannot create directory " + parent.string() + ": " + ec.message())};
  }

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->readOnly = options.readOnly;
  const int flags = options.readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int opened = options.readOnly
                         ? openReadOnly(path, impl->db.receive(), SQLITE_OPEN_NOMUTEX)
                         : sqlite3_open_v2(path.c_str(), impl->db.receive(), flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (opened != SQLITE_OK) {
    return Error{withPath(
        path, std::string("cannot open history database: ") + (impl->db ? sqlite3_errmsg(impl->db) : "out of memory"))};
  }
  sqlite3* db = impl->db;
  sqlite3_busy_timeout(db, options.busyTimeoutMs);
  sqlite3_extended_result_codes(db, 1);
  // SQLite opens a write-protected file (permissions, a read-only mount) read-only without a
  // word; every write would then fail. Say so once, here.
  if (!options.readOnly && sqlite3_db_readonly(db, "main") == 1) {
    return Error{withPath(path,
                          "the history database is read-only (the file or its file system cannot be written); "
                          "read commands (history list, show, compare, export --run) still open it")};
  }
  if (!options.readOnly) {
    // New files: 8 KiB pages fit more event rows per leaf; must precede the WAL switch.
    if (!exists) (void)exec(db, "PRAGMA page_size = 8192");
    auto mode = detail::queryInt(db, "PRAGMA journal_mode = WAL");
    if (!mode) return Error{withPath(path, "cannot switch to WAL: " + mode.message())};
    // NORMAL in WAL mode: a crash of the process never loses a committed transaction, and
    // the database stays consistent across power loss (SQLite docs, "Write-Ahead Logging").
    (void)exec(db, "PRAGMA synchronous = NORMAL");
  }
  (void)exec(db, "PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY");

  auto version = detail::queryInt(db, "PRAGMA user_version");
  if (!version) return Error{withPath(path, "not a PipeStudio history database (" + version.message() + ")")};
  impl->version = static_cast<int>(*version);
  if (options.readOnly) {
    if (impl->version < kSchemaVersion) {
      return Error{withPath(path, "history database has schema version " + std::to_string(impl->version) +
                                      " and needs a migration to " + std::to_string(kSchemaVersion) +
                                      "; open it read-write once")};
    }
  } else if (impl->version < options.targetSchemaVersion) {
    auto tx = detail::Transaction::begin(db);
    if (!tx) return Error{withPath(path, "cannot lock for migration: " + tx.message())};
    // Re-read under the write lock: another process may have migrated meanwhile.
    auto locked = detail::queryInt(db, "PRAGMA user_version");
    if (!locked || *locked > kSchemaVersion) {
      return Error{withPath(path, "history database changed schema while opening; try again")};
    }
    if (*locked < options.targetSchemaVersion) {
      if (auto st = detail::migrate(db, static_cast<int>(*locked), options.targetSchemaVersion); !st) {
        return Error{withPath(path, st.message())};
      }
    }
    if (auto st = tx->commit(); !st) return Error{withPath(path, "migration commit failed: " + st.message())};
    impl->version = options.targetSchemaVersion;
  }
  HistoryStore store(std::move(impl));
  if (!options.readOnly && store.m_impl->version == kSchemaVersion) {
    if (auto st = store.m_impl->prepareWriteStatements(); !st) return Error{withPath(path, st.message())};
    if (options.recoverInterruptedRuns) {
      if (auto r = store.recoverInterruptedRuns(); !r) return r.error();
    }
  }
  return store;
}

Expected<std::string> HistoryStore::integrityCheck() {
  Statement st(m_impl->db, "PRAGMA integrity_check", nullptr);
  if (!st) return Error{detail::lastError(m_impl->db)};
  std::string out;
  while (st.step() == SQLITE_ROW) {
    if (!out.empty()) out += '\n';
    out += st.text(0);
  }
  return out;
}

Expected<int> HistoryStore::recoverInterruptedRuns() {
  sqlite3* db = m_impl->db;
  struct Candidate {
    RunId id;
    std::string host;
    std::int64_t pid;
    std::string token;
  };
  std::vector<Candidate> dead;
  {
    Statement st(db,
                 "SELECT id, IFNULL(writer_host, ''), IFNULL(writer_pid, 0), IFNULL(writer_start, '') FROM runs "
                 "WHERE status = 'running'",
                 nullptr);
    if (!st) return Error{withPath(m_impl->path, detail::lastError(db))};
    while (st.step() == SQLITE_ROW) {
      Candidate c{st.i64(0), st.text(1), st.i64(2), st.text(3)};
      if (c.pid == getpid() && c.host == hostName()) continue;  // ours, still being written
      if (!writerAlive(c.host, c.pid, c.token)) dead.push_back(std::move(c));
    }
  }
  if (dead.empty()) return 0;
  if (auto st = m_impl->commit(); !st) return st.error();
  auto tx = detail::Transaction::begin(db);
  if (!tx) return Error{withPath(m_impl->path, tx.message())};
  Statement upd(db,
                "UPDATE runs SET status = 'incomplete', finished_ms = ?2, "
                "events = (SELECT COUNT(*) FROM events WHERE " RUN_EVENT_RANGE
                "), "
                "error = CASE WHEN error = '' THEN ?3 ELSE error END WHERE id = ?1 AND status = 'running'",
                nullptr);
  for (const auto& c : dead) {
    upd.bind(1, c.id);
    upd.bind(2, nowUnixMs());
    upd.bind(3, "ingest interrupted: writer process " + std::to_string(c.pid) + " on " + c.host +
                    " ended before finishing the run");
    if (upd.step() != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(db))};
    upd.reset();
  }
  upd = {};
  if (auto st = tx->commit(); !st) return Error{withPath(m_impl->path, st.message())};
  return static_cast<int>(dead.size());
}

}  // namespace pipestudio::history
