// Foreign SQLite files (Nsight Systems exports) are read through ForeignDb: a statement that
// runs past its budget is stopped, a value past the length limit is refused before it is
// allocated, and nothing the file defines (views, triggers) runs.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "TestSupport.hpp"
#include "TraceImportImpl.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;
using detail::ForeignDb;

namespace {

std::string makeDb(const TempDir& dir, const std::string& sql) {
  std::string path = dir.file("foreign.sqlite");
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
  return path;
}

// Steps `sql` on `d` to its end; the last result code.
int run(ForeignDb& d, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(d.get(), sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return sqlite3_errcode(d.get());
  int rc;
  while ((rc = d.step(st)) == SQLITE_ROW) {
  }
  sqlite3_finalize(st);
  return rc;
}

}  // namespace

TEST(ForeignDb, AStatementPastItsBudgetIsStoppedAndSaysSo) {
  TempDir dir;
  auto d = ForeignDb::open(makeDb(dir, "CREATE TABLE t(x)"), std::chrono::milliseconds(20));
  ASSERT_THAT(d, HasValue());
  // Endless: only the budget ends it.
  const int rc = run(**d, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c");
  EXPECT_EQ(rc & 0xff, SQLITE_INTERRUPT);
  EXPECT_NE((*d)->error().find("ran past its budget of 20 ms"), std::string::npos) << (*d)->error();
  // The budget is per step: the next statement runs normally.
  EXPECT_EQ(run(**d, "SELECT COUNT(*) FROM t"), SQLITE_DONE) << (*d)->error();
}

TEST(ForeignDb, AValuePastTheLengthLimitIsRefusedBeforeItIsBuilt) {
  TempDir dir;
  auto d = ForeignDb::open(makeDb(dir, "CREATE TABLE t(x)"));
  ASSERT_THAT(d, HasValue());
  const int rc = run(**d, "SELECT hex(zeroblob(300000000))");
  EXPECT_EQ(rc & 0xff, SQLITE_TOOBIG);
  EXPECT_NE((*d)->error().find("longer than 1048576 bytes"), std::string::npos) << (*d)->error();
}

TEST(ForeignDb, ViewsAndTriggersOfTheFileDoNotRun) {
  TempDir dir;
  auto d = ForeignDb::open(makeDb(dir,
                                  "CREATE TABLE t(x); CREATE VIEW v AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                                  "SELECT x + 1 FROM c) SELECT x FROM c;"));
  ASSERT_THAT(d, HasValue());
  EXPECT_NE(run(**d, "SELECT COUNT(*) FROM v"), SQLITE_DONE);
  EXPECT_EQ(run(**d, "SELECT COUNT(*) FROM t"), SQLITE_DONE) << (*d)->error();
}
