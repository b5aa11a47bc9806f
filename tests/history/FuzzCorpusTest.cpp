// The trace readers' fuzz corpus (tests/fuzz/corpus/traces), replayed in every build through
// the fuzz target's own body: what a fuzzing run found stays fixed without a clang build.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "TestSupport.hpp"
#include "fuzz/TraceFuzzBody.hpp"

using namespace pipestudio;
using namespace pipestudio::history;
using namespace pipestudio::history::testing;

TEST(FuzzCorpus, EveryTraceInputImportsOrIsRefusedWithoutCrashing) {
  const std::filesystem::path corpus =
      std::filesystem::path(PIPESTUDIO_TEST_DATA) / ".." / "fuzz" / "corpus" / "traces";
  ASSERT_TRUE(std::filesystem::is_directory(corpus)) << corpus;
  TempDir dir;
  auto store = HistoryStore::open(dir.file("h.sqlite"));
  ASSERT_THAT(store, HasValue());
  int inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    SCOPED_TRACE(entry.path().filename().string());
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    fuzz::fuzzTraceInput(bytes.str(), *store, dir.file("input.trace"));
    ++inputs;
  }
  EXPECT_GT(inputs, 10);
  // Every input's run was deleted again: none left "running" or half written.
  auto runs = store->listRuns();
  ASSERT_THAT(runs, HasValue());
  EXPECT_TRUE(runs->empty());
}
