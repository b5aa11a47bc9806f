#pragma once
// Thin RAII over the sqlite3 C API: a connection, prepared statements, transactions.
// Private to core/history.

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Text.hpp"

namespace pipestudio::history::detail {

/// An open database handle, closed on destruction. Statements prepared on it must be
/// finalised first (sqlite3_close refuses while any is live): declare it before them.
class Connection {
 public:
  Connection() = default;
  ~Connection() { sqlite3_close(m_db); }
  Connection(Connection&& o) noexcept : m_db(std::exchange(o.m_db, nullptr)) {}
  Connection& operator=(Connection&& o) noexcept {
    if (this != &o) {
      sqlite3_close(m_db);
      m_db = std::exchange(o.m_db, nullptr);
    }
    return *this;
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// For sqlite3_open_v2: closes the handle held so far and receives the new one (which
  /// SQLite sets even when the open fails, to carry the message).
  sqlite3** receive() {
    sqlite3_close(std::exchange(m_db, nullptr));
    return &m_db;
  }
  sqlite3* get() const { return m_db; }
  operator sqlite3*() const { return m_db; }  // NOLINT(google-explicit-constructor): a handle
  explicit operator bool() const { return m_db != nullptr; }

 private:
  sqlite3* m_db = nullptr;
};

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, std::string_view sql, std::string* error);
  ~Statement() { sqlite3_finalize(m_stmt); }
  Statement(Statement&& o) noexcept : m_stmt(std::exchange(o.m_stmt, nullptr)) {}
  Statement& operator=(Statement&& o) noexcept {
    if (this != &o) {
      sqlite3_finalize(m_stmt);
      m_stmt = std::exchange(o.m_stmt, nullptr);
    }
    return *this;
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  explicit operator bool() const { return m_stmt != nullptr; }
  sqlite3_stmt* get() const { return m_stmt; }

  // Parameters are 1-based, as in SQLite.
  void bind(int i, std::int64_t v) { sqlite3_bind_int64(m_stmt, i, v); }
  void bind(int i, int v) { sqlite3_bind_int(m_stmt, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(m_stmt, i, v); }
  // Text enters the history as UTF-8 whatever its source (a trace's kernel names, a run name
  // typed in a terminal): invalid sequences are repaired here, once, so no listing or JSON
  // document built from the database can meet them. A default-constructed string_view has a
  // null data(), which SQLite would store as NULL.
  void bind(int i, std::string_view v) {
    if (!isValidUtf8(v)) {
      const std::string repaired = repairUtf8(v);
      sqlite3_bind_text(m_stmt, i, repaired.data(), static_cast<int>(repaired.size()), SQLITE_TRANSIENT);
      return;
    }
    sqlite3_bind_text(m_stmt, i, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  /// The caller keeps `v` alive until the step, and `v` is valid UTF-8 (our own text).
  void bindStatic(int i, std::string_view v) {
    sqlite3_bind_text(m_stmt, i, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void bindNull(int i) { sqlite3_bind_null(m_stmt, i); }

  /// SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return sqlite3_step(m_stmt); }
  void reset() { sqlite3_reset(m_stmt); }

  std::int64_t i64(int col) const { return sqlite3_column_int64(m_stmt, col); }
  int i32(int col) const { return sqlite3_column_int(m_stmt, col); }
  double f64(int col) const { return sqlite3_column_double(m_stmt, col); }
  bool isNull(int col) const { return sqlite3_column_type(m_stmt, col) == SQLITE_NULL; }
  /// The column's text, repaired to UTF-8 (a database written before text was checked on
  /// entry, or edited by hand, may hold anything).
  std::string text(int col) const {
    const auto* p = sqlite3_column_text(m_stmt, col);
    if (p == nullptr) return {};
    const std::string_view raw(reinterpret_cast<const char*>(p),
                               static_cast<std::size_t>(sqlite3_column_bytes(m_stmt, col)));
    return isValidUtf8(raw) ? std::string(raw) : repairUtf8(raw);
  }

 private:
  sqlite3_stmt* m_stmt = nullptr;
};

/// Runs SQL without results (may hold several statements); returns SQLite's message on error.
Status exec(sqlite3* db, std::string_view sql);

/// A write transaction (BEGIN IMMEDIATE: the write lock is taken at once, waiting up to the
/// busy timeout, rather than at the first write). Rolled back on destruction unless commit()
/// succeeded, so every early return of a failed write leaves the database as it was.
class Transaction {
 public:
  /// SQLite's message when the lock cannot be had.
  static Expected<Transaction> begin(sqlite3* db);
  ~Transaction() { rollback(); }
  Transaction(Transaction&& o) noexcept : m_db(std::exchange(o.m_db, nullptr)) {}
  Transaction& operator=(Transaction&& o) noexcept {
    if (this != &o) {
      rollback();
      m_db = std::exchange(o.m_db, nullptr);
    }
    return *this;
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  /// Commits; on failure the transaction is still open and rolled back on destruction.
  Status commit();
  void rollback();

 private:
  explicit Transaction(sqlite3* db) : m_db(db) {}
  sqlite3* m_db = nullptr;  ///< null once committed or rolled back
};
/// The first column of the first row of a query as an integer (or the error).
Expected<std::int64_t> queryInt(sqlite3* db, std::string_view sql);
/// SQLite's message for the connection's last error; a damaged file (SQLITE_CORRUPT,
/// SQLITE_NOTADB), a read-only one and a full disk are named as such.
std::string lastError(sqlite3* db);
/// Whether an SQLite result code says the file is damaged.
bool isDamage(int rc);
/// "the history database is damaged (WHAT): …" with what to do about it.
std::string damagedMessage(std::string_view what);

}  // namespace pipestudio::history::detail
