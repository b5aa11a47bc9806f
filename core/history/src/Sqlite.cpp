#include "Sqlite.hpp"

#include "pipestudio/common/Try.hpp"

namespace pipestudio::history::detail {

Statement::Statement(sqlite3* db, std::string_view sql, std::string* error) {
  // SQLITE_PREPARE_PERSISTENT: these statements live as long as the store and are reused
  // for every row (SQLite docs, sqlite3_prepare_v3).
  if (sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &m_stmt, nullptr) !=
      SQLITE_OK) {
    if (error) *error = std::string(sqlite3_errmsg(db)) + " (in: " + std::string(sql.substr(0, 80)) + ")";
    sqlite3_finalize(m_stmt);
    m_stmt = nullptr;
  }
}

std::string damagedMessage(std::string_view what) {
  return "the history database is damaged (" + std::string(what) +
         "): what it holds cannot be trusted; restore a backup, or copy out what is readable with "
         "sqlite3's .recover command";
}

bool isDamage(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

std::string lastError(sqlite3* db) {
  // The failures a user can act on are named plainly: every read and write path reports
  // through here. A damaged file is said to be damaged, never passed off as missing rows.
  std::string message = sqlite3_errmsg(db);
  const int code = sqlite3_errcode(db);
  if (isDamage(code)) return damagedMessage(message);
  switch (code & 0xff) {
    case SQLITE_READONLY:
      return "the history database is read-only (" + message + ")";
    case SQLITE_FULL:
      return "disk full (" + message + ")";
    default:
      return message;
  }
}

Status exec(sqlite3* db, std::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  if (sqlite3_exec(db, text.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = err ? err : "unknown SQLite error";
    sqlite3_free(err);
    return Error{message};
  }
  return {};
}

Expected<Transaction> Transaction::begin(sqlite3* db) {
  PS_RETURN_IF_ERROR(exec(db, "BEGIN IMMEDIATE"));
  return Transaction(db);
}

Status Transaction::commit() {
  if (m_db == nullptr) return Error{"no open transaction to commit"};
  PS_RETURN_IF_ERROR(exec(m_db, "COMMIT"));
  m_db = nullptr;
  return {};
}

void Transaction::rollback() {
  if (m_db != nullptr) (void)exec(std::exchange(m_db, nullptr), "ROLLBACK");
}

Expected<std::int64_t> queryInt(sqlite3* db, std::string_view sql) {
  std::string error;
  Statement st(db, sql, &error);
  if (!st) return Error{error};
  const int rc = st.step();
  if (rc == SQLITE_ROW) return st.i64(0);
  if (rc == SQLITE_DONE) return std::int64_t{0};
  return Error{lastError(db)};
}

}  // namespace pipestudio::history::detail
