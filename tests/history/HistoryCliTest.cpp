// pipestudio-cli history, end to end through the real binary (docs/cli.md).

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>

#include "TestSupport.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/plan/PlanIO.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

namespace {

class HistoryCli : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef PIPESTUDIO_CLI
    GTEST_SKIP() << "pipestudio-cli is not part of this build";
#endif
    m_db = m_dir.file("h.sqlite");
  }
  std::string db() const { return "--db " + m_db; }
  TempDir m_dir;
  std::string m_db;
};

}  // namespace

TEST_F(HistoryCli, ImportListShowCompare) {
  const std::string stream = m_dir.file("run.pstrace");
  writeFile(stream, trace::encodeStream(executorFrames(smallPlan(), {.iterations = 2})));
  const std::string planFile = m_dir.file("plan.json");
  ASSERT_TRUE(savePlan(planFile, smallPlan()));

  auto a = cli(m_dir, "history " + db() + " import " + stream + " --plan " + planFile);
  ASSERT_EQ(a.exitCode, 0) << a.err;
  const std::string idA = a.out.substr(0, a.out.find('\n'));
  EXPECT_EQ(idA, "1");

  const std::string slow = m_dir.file("slow.pstrace");
  writeFile(slow, trace::encodeStream(executorFrames(smallPlan(), {.iterations = 2, .slowdown = 1.25})));
  auto b = cli(m_dir, "history import " + slow + " --json " + db());
  ASSERT_EQ(b.exitCode, 0) << b.err;
  const Json bj = Json::parse(b.out);
  EXPECT_EQ(bj["id"], 2);

  auto list = cli(m_dir, "history " + db() + " list --json");
  ASSERT_EQ(list.exitCode, 0) << list.err;
  const Json lj = Json::parse(list.out);
  ASSERT_TRUE(lj.is_array());
  ASSERT_EQ(lj.size(), 2u);
  for (const auto& r : lj) {
    for (const char* key : {"id", "status", "events", "created", "plan"}) EXPECT_TRUE(r.contains(key)) << key;
  }
  auto text = cli(m_dir, "history " + db() + " list");
  EXPECT_EQ(text.exitCode, 0);
  EXPECT_NE(text.out.find("complete"), std::string::npos);

  auto show = cli(m_dir, "history " + db() + " show 1 --json");
  ASSERT_EQ(show.exitCode, 0) << show.err;
  const Json sj = Json::parse(show.out);
  EXPECT_EQ(sj["id"], 1);
  EXPECT_EQ(sj["status"], "complete");
  EXPECT_EQ(sj["plan"], 1);
  EXPECT_GT(sj["events"].get<int>(), 0);
  EXPECT_EQ(sj["idle"].size(), 2u);

  auto cmp = cli(m_dir, "history " + db() + " compare 1 2 --json");
  ASSERT_EQ(cmp.exitCode, 0) << cmp.err;
  const Json cj = Json::parse(cmp.out);
  for (const char* key : {"a", "b", "by_name", "by_device", "step"}) EXPECT_TRUE(cj.contains(key)) << key;
  EXPECT_EQ(cj.size(), 5u);
  auto table = cli(m_dir, "history " + db() + " compare 1 2");
  EXPECT_EQ(table.exitCode, 0);
  EXPECT_NE(table.out.find("step time"), std::string::npos) << table.out;

  auto vsPlan = cli(m_dir, "history " + db() + " compare 1 plan --json");
  ASSERT_EQ(vsPlan.exitCode, 0) << vsPlan.err;
  EXPECT_EQ(Json::parse(vsPlan.out)["ops"].size(), smallPlan().ops.size());

  EXPECT_EQ(cli(m_dir, "history " + db() + " rename 2 slower").exitCode, 0);
  EXPECT_EQ(cli(m_dir, "history " + db() + " note 2 'clock at 80%'").exitCode, 0);
  const Json renamed = Json::parse(cli(m_dir, "history " + db() + " show 2 --json").out);
  EXPECT_EQ(renamed["name"], "slower");
  EXPECT_EQ(renamed["notes"], "clock at 80%");
  EXPECT_EQ(cli(m_dir, "history " + db() + " delete 2").exitCode, 0);
  EXPECT_EQ(Json::parse(cli(m_dir, "history " + db() + " list --json").out).size(), 1u);
}

TEST_F(HistoryCli, ChromeImportReportsSkips) {
  const std::string trace = m_dir.file("t.json");
  writeFile(trace, R"({"traceEvents": [{"name": "k", "ph": "X", "ts": 1, "dur": 2, "pid": 0, "tid": 0},
                                        {"name": "bad", "ph": "X", "ts": 1}, {"name": "k", "ph": "X", "ts": 4, "dur": 1)");
  auto r = cli(m_dir, "history " + db() + " import " + trace + " --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["id"], 1);
  EXPECT_EQ(j["events"], 1);
  EXPECT_EQ(j["skipped"], 2);  // the event without dur, the one cut by the truncation
  EXPECT_NE(r.err.find("byte"), std::string::npos) << r.err;
}

TEST_F(HistoryCli, BadInputAndUsage) {
  auto missing = cli(m_dir, "history " + db() + " show 42");
  EXPECT_EQ(missing.exitCode, 1);
  EXPECT_NE(missing.err.find("no run with id 42"), std::string::npos) << missing.err;
  EXPECT_EQ(cli(m_dir, "history " + db() + " show abc").exitCode, 2);
  EXPECT_EQ(cli(m_dir, "history " + db() + " compare 1").exitCode, 2);
  EXPECT_EQ(cli(m_dir, "history " + db()).exitCode, 2);
  const std::string garbage = m_dir.file("garbage.bin");
  writeFile(garbage,
            "\x7f"
            "ELF not a trace");
  auto bad = cli(m_dir, "history " + db() + " import " + garbage);
  EXPECT_EQ(bad.exitCode, 1);
  EXPECT_NE(bad.err.find("garbage.bin"), std::string::npos) << bad.err;
  auto nofile = cli(m_dir, "history " + db() + " import " + m_dir.file("nope.json"));
  EXPECT_EQ(nofile.exitCode, 1);

  // A database from a newer PipeStudio: refused with a clear message, exit 1, file unchanged.
  {
    auto s = HistoryStore::open(m_db);
    ASSERT_TRUE(s);
    sqlite3_exec(s->connection(), "PRAGMA user_version = 7; PRAGMA wal_checkpoint(TRUNCATE);", nullptr, nullptr,
                 nullptr);
  }
  const std::string before = readFile(m_db);
  auto newer = cli(m_dir, "history " + db() + " list");
  EXPECT_EQ(newer.exitCode, 1);
  EXPECT_NE(newer.err.find("newer than this build"), std::string::npos) << newer.err;
  EXPECT_EQ(readFile(m_db), before);
}

TEST_F(HistoryCli, DefaultDatabaseUnderXdgDataHome) {
  const std::string xdg = m_dir.file("xdg");
  const std::string stream = m_dir.file("run.pstrace");
  writeFile(stream, trace::encodeStream(executorFrames(smallPlan())));
  auto imp = cli(m_dir, "history import " + stream + " --json", "XDG_DATA_HOME=" + xdg);
  ASSERT_EQ(imp.exitCode, 0) << imp.err;
  EXPECT_TRUE(std::filesystem::exists(xdg + "/pipestudio/history.sqlite"));
  auto list = cli(m_dir, "history list --json", "XDG_DATA_HOME=" + xdg);
  ASSERT_EQ(list.exitCode, 0) << list.err;
  EXPECT_EQ(Json::parse(list.out).size(), 1u);
}
