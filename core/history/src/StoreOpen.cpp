// Opening a history database: refusing what is not ours or newer, read-only and immutable
// opens, WAL setup, schema migration, and marking runs of dead writers incomplete.
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "Impl.hpp"
#include "ProcessProbe.hpp"
#include "Schema.hpp"
#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::history {

using detail::exec;
using detail::Statement;

namespace {

// Whether the connection's last failure was a lock held by another connection.
bool busy(sqlite3* db) {
  const int code = sqlite3_errcode(db) & 0xff;
  return code == SQLITE_BUSY || code == SQLITE_LOCKED;
}

// A read-only open of a WAL database needs its -shm file; on a read-only mount without one,
// SQLite cannot open it at all. Nobody can write there either, so it is opened immutable.
int openReadOnly(const std::string& path, sqlite3** db, int busyTimeoutMs, int extraFlags = 0) {
  int rc = sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READONLY | extraFlags, nullptr);
  if (rc == SQLITE_OK) {
    // Before the first read: a file another process is creating is waited for, not refused.
    sqlite3_busy_timeout(*db, busyTimeoutMs);
    sqlite3_extended_result_codes(*db, 1);
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
      std::array<char, 4> buf{};
      std::snprintf(buf.data(), buf.size(), "%%%02X", static_cast<unsigned char>(c));
      uri += buf.data();
    } else {
      uri += c;
    }
  }
  rc =
      sqlite3_open_v2((uri + "?immutable=1").c_str(), db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | extraFlags, nullptr);
  if (rc == SQLITE_OK) sqlite3_extended_result_codes(*db, 1);
  return rc;
}

// The database and the files SQLite keeps beside it must be regular files: SQLite would block
// forever opening a FIFO, and fail on a directory or device only after creating a journal
// beside it.
Status checkDatabaseFiles(const std::string& path, bool exists) {
  if (exists) {
    if (auto st = checkRegularFile(path); !st) {
      return Error{st.message() + ": a history database is a regular file; choose another with --db"};
    }
  }
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string companion = path + suffix;
    std::error_code ec;
    if (std::filesystem::symlink_status(companion, ec).type() == std::filesystem::file_type::not_found) continue;
    if (auto st = checkRegularFile(companion); !st) {
      return Error{st.message() + ": SQLite keeps its " + (suffix + 1) + " file there"};
    }
  }
  return {};
}

// What an existing file is, read in one statement (one snapshot: another process creating the
// database commits its tables, version and application id together, and a reader must see
// all of them or none).
struct FileFacts {
  std::int64_t version = 0;
  std::int64_t applicationId = 0;
  std::int64_t tables = 0;
};

// One attempt at opening; `lockConflict` is set when it failed on another connection's lock,
// which open() waits out.
class Opener {
 public:
  Opener(const std::string& path, const OpenOptions& options) : m_path(path), m_options(options) {}
  bool lockConflict = false;

  /// The opened, migrated connection's state; open() wraps it in the store.
  Expected<std::unique_ptr<HistoryStore::Impl>> attempt();

 private:
  Error fail(sqlite3* db, const std::string& message) {
    if (db != nullptr && busy(db)) lockConflict = true;
    return Error{withPath(m_path, message)};
  }
  Status inspectExisting();
  Expected<bool> createComplete();

  const std::string& m_path;
  const OpenOptions& m_options;
};

// Inspects an existing file read-only first: a newer schema or a foreign file must be refused
// before anything (WAL switch, migration, recovery) could write to it.
Status Opener::inspectExisting() {
  detail::Connection probe;
  const int rc = openReadOnly(m_path, probe.receive(), m_options.busyTimeoutMs);
  if (rc != SQLITE_OK) {
    const std::string m = probe ? sqlite3_errmsg(probe) : "out of memory";
    if (rc == SQLITE_NOTADB) return fail(probe, "not a PipeStudio history database (" + m + ")");
    if (detail::isDamage(rc)) return fail(probe, detail::damagedMessage(m));
    return fail(probe, "cannot open history database: " + m);
  }
  detail::Statement st(probe,
                       "SELECT (SELECT user_version FROM pragma_user_version), "
                       "(SELECT application_id FROM pragma_application_id), (SELECT COUNT(*) FROM sqlite_schema)",
                       nullptr);
  if (!st || st.step() != SQLITE_ROW) {
    if (busy(probe)) return fail(probe, "cannot read the history database: " + detail::lastError(probe));
    return fail(probe, "not a PipeStudio history database (" + detail::lastError(probe) + ")");
  }
  const FileFacts facts{st.i64(0), st.i64(1), st.i64(2)};
  if (facts.applicationId != 0 && facts.applicationId != detail::kApplicationId) {
    return Error{withPath(m_path, "not a PipeStudio history database (SQLite application_id " +
                                      std::to_string(facts.applicationId) + "); choose another file with --db")};
  }
  if (facts.version > kSchemaVersion) {
    return Error{withPath(m_path, "history database has schema version " + std::to_string(facts.version) +
                                      ", newer than this build supports (" + std::to_string(kSchemaVersion) +
                                      "); it was written by a newer PipeStudio. Upgrade PipeStudio or choose another "
                                      "file with --db. The file was not modified.")};
  }
  // A SQLite file we did not create: only an empty one is adopted.
  if (facts.version == 0 && facts.applicationId == 0 && facts.tables > 0) {
    return Error{withPath(m_path,
                          "not a PipeStudio history database (a SQLite file with other tables); choose another "
                          "file with --db")};
  }
  return {};
}

// One creator: a new database is built whole (page size, WAL mode, schema) in a file of its own
// beside `path` and linked into place, which succeeds for exactly one of several processes
// creating it at once; the others find a complete database there. No process ever sees a
// half-created file (once read as "not a PipeStudio history database"), and none contends
// for the rollback-journal locks a new file starts with. Returns false where the file system
// cannot link (the caller then creates in place).
Expected<bool> Opener::createComplete() {
  static std::atomic<int> counter{0};
  const std::string fresh = m_path + ".new-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const auto removeFresh = [&fresh] {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((fresh + suffix).c_str());
  };
  {
    detail::Connection db;
    if (sqlite3_open_v2(fresh.c_str(), db.receive(), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      removeFresh();
      return Error{withPath(
          m_path, std::string("cannot create history database: ") + (db ? detail::lastError(db) : "out of memory"))};
    }
    // 8 KiB pages fit more event rows per leaf; the page size must precede the WAL switch.
    Status st = exec(db, "PRAGMA page_size = 8192");
    if (st) {
      auto mode = detail::queryInt(db, "PRAGMA journal_mode = WAL");
      if (!mode) st = mode.error();
    }
    if (st) {
      auto tx = detail::Transaction::begin(db);
      st = tx ? detail::migrate(db, 0, m_options.targetSchemaVersion) : Status(tx.error());
      if (st) st = tx->commit();
    }
    if (!st) {
      db = {};
      removeFresh();
      return Error{withPath(m_path, "cannot create history database: " + st.message())};
    }
  }  // closed: SQLite checkpoints the WAL into the file and removes it
  const int linked = ::link(fresh.c_str(), m_path.c_str());
  const int err = errno;
  removeFresh();
  if (linked == 0 || err == EEXIST) return true;
  if (err == EPERM || err == EOPNOTSUPP || err == EXDEV || err == EMLINK) return false;
  return Error{withPath(m_path, std::string("cannot create history database: ") + std::strerror(err))};
}

Expected<std::unique_ptr<HistoryStore::Impl>> Opener::attempt() {
  namespace fs = std::filesystem;
  std::error_code ec;
  bool exists = fs::exists(m_path, ec);
  PS_RETURN_IF_ERROR(checkDatabaseFiles(m_path, exists));
  if (!exists && m_options.readOnly) return Error{withPath(m_path, "no history database here")};
  if (!exists) {
    const fs::path parent = fs::path(m_path).parent_path();
    if (!m_options.createDirectories && !parent.empty() && !fs::is_directory(parent, ec)) {
      return Error{withPath(m_path, "directory " + parent.string() + " does not exist (expected an existing folder)")};
    }
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec) return Error{withPath(m_path, "cannot create directory " + parent.string() + ": " + ec.message())};
    PS_ASSIGN_OR_RETURN(auto created, createComplete());
    exists = created;
  }
  if (exists) {
    PS_RETURN_IF_ERROR(inspectExisting());
  }

  auto impl = std::make_unique<HistoryStore::Impl>();
  impl->path = m_path;
  impl->readOnly = m_options.readOnly;
  const int flags = m_options.readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int opened = m_options.readOnly
                         ? openReadOnly(m_path, impl->db.receive(), m_options.busyTimeoutMs, SQLITE_OPEN_NOMUTEX)
                         : sqlite3_open_v2(m_path.c_str(), impl->db.receive(), flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (opened != SQLITE_OK) {
    return fail(impl->db, std::string("cannot open history database: ") +
                              (impl->db ? detail::lastError(impl->db) : "out of memory"));
  }
  sqlite3* db = impl->db;
  sqlite3_busy_timeout(db, m_options.busyTimeoutMs);
  sqlite3_extended_result_codes(db, 1);
  // Damage is found as pages are read, not only when a query trips over it.
  (void)exec(db, "PRAGMA cell_size_check = ON");
  // SQLite opens a write-protected file (permissions, a read-only mount) read-only without a
  // word; every write would then fail. Say so once, here.
  if (!m_options.readOnly && sqlite3_db_readonly(db, "main") == 1) {
    return Error{withPath(m_path,
                          "the history database is read-only (the file or its file system cannot be written); "
                          "read commands (history list, show, compare, export --run) still open it")};
  }
  if (!m_options.readOnly) {
    // Created in place (no links on this file system): as createComplete does it.
    if (!exists) (void)exec(db, "PRAGMA page_size = 8192");
    auto mode = detail::queryInt(db, "PRAGMA journal_mode = WAL");
    if (!mode) return fail(db, "cannot switch to WAL: " + mode.message());
    // NORMAL in WAL mode: a crash of the process never loses a committed transaction, and
    // the database stays consistent across power loss (SQLite docs, "Write-Ahead Logging").
    (void)exec(db, "PRAGMA synchronous = NORMAL");
  }
  (void)exec(db, "PRAGMA cache_size = -65536; PRAGMA temp_store = MEMORY");

  auto version = detail::queryInt(db, "PRAGMA user_version");
  if (!version) return fail(db, "not a PipeStudio history database (" + version.message() + ")");
  impl->version = static_cast<int>(*version);
  if (m_options.readOnly) {
    if (impl->version < kSchemaVersion) {
      return Error{withPath(m_path, "history database has schema version " + std::to_string(impl->version) +
                                        " and needs a migration to " + std::to_string(kSchemaVersion) +
                                        "; open it read-write once")};
    }
  } else if (impl->version < m_options.targetSchemaVersion) {
    // One creator: the migration runs under the write lock, and whoever takes it second finds
    // the schema already there.
    auto tx = detail::Transaction::begin(db);
    if (!tx) return fail(db, "cannot lock for migration: " + tx.message());
    auto locked = detail::queryInt(db, "PRAGMA user_version");
    if (!locked) return fail(db, "cannot read the schema version: " + locked.message());
    if (*locked > kSchemaVersion) {
      return Error{withPath(m_path, "history database changed schema while opening; try again")};
    }
    if (*locked < m_options.targetSchemaVersion) {
      if (auto st = detail::migrate(db, static_cast<int>(*locked), m_options.targetSchemaVersion); !st) {
        return fail(db, st.message());
      }
    }
    if (auto st = tx->commit(); !st) return fail(db, "migration commit failed: " + st.message());
    impl->version = m_options.targetSchemaVersion;
  }
  if (!m_options.readOnly && impl->version == kSchemaVersion) {
    if (auto st = impl->prepareWriteStatements(); !st) return fail(db, st.message());
  }
  return impl;
}

}  // namespace

Expected<HistoryStore> HistoryStore::open(const std::string& path, const OpenOptions& options) {
  if (options.targetSchemaVersion < 1 || options.targetSchemaVersion > kSchemaVersion) {
    return Error{"schema version " + std::to_string(options.targetSchemaVersion) + " is not one this build can create"};
  }
  if (path.empty()) {
    return Error{
        "no history database path: HOME and XDG_DATA_HOME are unset and the user has no home directory "
        "(expected --db FILE, or one of them set)"};
  }
  // Creation, migration and writes of other processes are waited for: statements wait through
  // SQLite's busy timeout, and the steps where SQLite answers "locked" at once rather than risk
  // a deadlock (switching a new file to WAL while another connection reads it) are retried
  // as a whole until that timeout has passed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.busyTimeoutMs);
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    Opener opener(path, options);
    auto impl = opener.attempt();
    if (impl) {
      HistoryStore store(std::move(*impl));
      if (options.readOnly || !options.recoverInterruptedRuns || store.schemaVersion() != kSchemaVersion) return store;
      auto recovered = store.recoverInterruptedRuns();
      if (recovered) return store;
      if (!busy(store.connection()) || std::chrono::steady_clock::now() >= deadline) return recovered.error();
    } else if (!opener.lockConflict || std::chrono::steady_clock::now() >= deadline) {
      return impl.error();
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

Expected<std::string> HistoryStore::integrityCheck() {
  Statement st(m_impl->db, "PRAGMA integrity_check", nullptr);
  if (!st) return Error{detail::lastError(m_impl->db)};
  std::string out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    if (!out.empty()) out += '\n';
    out += st.text(0);
  }
  if (rc != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(m_impl->db))};
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
    int rc;
    while ((rc = st.step()) == SQLITE_ROW) {
      Candidate c{st.i64(0), st.text(1), st.i64(2), st.text(3)};
      if (c.pid == getpid() && c.host == hostName()) continue;  // ours, still being written
      if (!writerAlive(c.host, c.pid, c.token)) dead.push_back(std::move(c));
    }
    if (rc != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(db))};
  }
  if (dead.empty()) return 0;
  PS_RETURN_IF_ERROR(m_impl->commit());
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
    upd.bind(3, interruptedRunMessage(c.host, c.pid));
    if (upd.step() != SQLITE_DONE) return Error{withPath(m_impl->path, detail::lastError(db))};
    upd.reset();
  }
  upd = {};
  if (auto st = tx->commit(); !st) return Error{withPath(m_impl->path, st.message())};
  for (const auto& c : dead) releaseRunSpace(m_impl->path, c.id, c.pid);
  return static_cast<int>(dead.size());
}

}  // namespace pipestudio::history
