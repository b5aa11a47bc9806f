#pragma once
// The body of the trace-reader fuzz target (FuzzTraces.cpp), shared with the corpus replay
// test (tests/history/FuzzCorpusTest.cpp) so that every build runs the corpus through the same
// code a fuzzing build searches with.
//
// One input is one trace file of any format: it is imported as a run (format by content: a
// PipeStudio stream, Chrome/Kineto JSON plain or gzip, an Nsight Systems SQLite export), and a
// stream is also decoded whole and byte by byte. A run the import stored is read back the way
// `history show`, `history compare` and `export --run` read it.
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "pipestudio/history/Compare.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/history/TraceImport.hpp"
#include "pipestudio/trace/Stream.hpp"

namespace pipestudio::fuzz {

inline void fuzzTraceInput(std::string_view bytes, history::HistoryStore& store, const std::string& file) {
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // The decoder alone, whole and in single bytes: both must agree on what is a frame.
  const auto whole = trace::decodeAll(bytes);
  trace::StreamDecoder bytewise;
  std::size_t frames = 0;
  for (const char c : bytes) {
    bytewise.feed(std::string_view(&c, 1));
    while (bytewise.next()) ++frames;
  }
  if (frames != whole.frames.size()) __builtin_trap();

  history::TraceImportOptions options;
  auto imported = history::importTraces(store, {file}, options);
  if (!imported) return;
  const history::RunId run = imported->runId;
  (void)store.runSummary(run);
  (void)history::idleBreakdown(store, run);
  if (auto plan = store.runAsPlan(run)) (void)plan->ops.size();
  if (auto c = history::compareRuns(store, run, run)) {
    (void)history::comparisonToJson(*c).dump();
    (void)history::comparisonTable(*c);
  }
  if (auto runs = store.listRuns()) {
    for (const auto& r : *runs) (void)history::runSummaryToJson(r).dump();
  }
  (void)store.deleteRun(run);
}

}  // namespace pipestudio::fuzz
