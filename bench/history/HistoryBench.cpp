// Ingest and compare speed of the run history (issue 6 targets, on one core):
// binary stream ingest >= 1M events/s, Chrome JSON import >= 300k events/s,
// comparing two 1M-event runs <= 1 s. Figures are printed by report.sh, never asserted.

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "pipestudio/history/Compare.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "support/SyntheticStream.hpp"

using namespace pipestudio;
using namespace pipestudio::history;

namespace {

std::filesystem::path scratch() {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("pipestudio-bench-history-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void removeDb(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

// An empty store at `path`, made outside the timed region.
Expected<HistoryStore> freshStore(benchmark::State& state, const std::string& path) {
  state.PauseTiming();
  removeDb(path);
  auto store = HistoryStore::open(path);
  if (!store) state.SkipWithError(store.message().c_str());
  state.ResumeTiming();
  return store;
}

const std::string& stream1M() {
  static const std::string s = test::syntheticStream(1'000'000, 4);
  return s;
}

// A Kineto-shaped trace: kernels with their usual args, CPU ops and runtime calls.
std::string makeChromeFile(std::int64_t events) {
  std::string path = (scratch() / ("chrome-" + std::to_string(events) + ".json")).string();
  if (std::filesystem::exists(path)) return path;
  std::ofstream out(path);
  out << R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], "traceEvents": [)"
      << '\n';
  for (std::int64_t i = 0; i < events; ++i) {
    const double ts = 1700000000000.0 + static_cast<double>(i) * 3.5;
    if (i) out << ",\n";
    switch (i % 4) {
      case 0:
        out << R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242, "ts": )" << ts
            << R"(, "dur": 12.5, "args": {"External id": )" << i << "}}";
        break;
      case 1:
        out << R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": )"
            << ts << R"(, "dur": 4.0, "args": {"correlation": )" << i << R"(, "cbid": 211}})";
        break;
      default:
        out << R"({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "pid": 0, "tid": 7, "ts": )"
            << ts << R"(, "dur": 2.75, "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": )"
            << i << R"(, "grid": [132, 1, 1], "block": [384, 1, 1]}})";
        break;
    }
  }
  out << "\n]}\n";
  return path;
}

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark names
void BM_IngestBinaryStream(benchmark::State& state) {
  const std::string& bytes = stream1M();
  const std::string path = (scratch() / "ingest.sqlite").string();
  for (auto _ : state) {
    auto store = freshStore(state, path);
    auto run = store->ingestStream(bytes);
    if (!run) state.SkipWithError(run.message().c_str());
  }
  state.SetItemsProcessed(state.iterations() * 1'000'000);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes.size()));
}
BENCHMARK(BM_IngestBinaryStream)->Unit(benchmark::kMillisecond)->Iterations(3);

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark names
void BM_DecodeStreamOnly(benchmark::State& state) {
  const std::string& bytes = stream1M();
  for (auto _ : state) {
    trace::StreamDecoder d;
    d.feed(bytes);
    std::int64_t n = 0;
    while (auto f = d.next()) ++n;
    benchmark::DoNotOptimize(n);
  }
  state.SetItemsProcessed(state.iterations() * 1'000'000);
}
BENCHMARK(BM_DecodeStreamOnly)->Unit(benchmark::kMillisecond);

// What the ingest does: decode into one reused frame (no allocation per kernel name).
// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark names
void BM_DecodeStreamReusedFrame(benchmark::State& state) {
  const std::string& bytes = stream1M();
  for (auto _ : state) {
    trace::StreamDecoder d;
    d.feed(bytes);
    trace::Frame frame;
    std::int64_t n = 0;
    while (d.next(frame)) ++n;
    benchmark::DoNotOptimize(n);
  }
  state.SetItemsProcessed(state.iterations() * 1'000'000);
}
BENCHMARK(BM_DecodeStreamReusedFrame)->Unit(benchmark::kMillisecond);

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark names
void BM_ImportChromeJson(benchmark::State& state) {
  const std::int64_t events = state.range(0);
  const std::string file = makeChromeFile(events);
  const std::string path = (scratch() / "chrome.sqlite").string();
  for (auto _ : state) {
    auto store = freshStore(state, path);
    auto r = store->importChromeTrace(file);
    if (!r || r->events != events) {
      const std::string why = !r ? r.message()
                                 : "imported " + std::to_string(r->events) + " of " + std::to_string(events) +
                                       " events: " + r->firstError.value_or("");
      state.SkipWithError(why.c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * events);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(std::filesystem::file_size(file)));
}
BENCHMARK(BM_ImportChromeJson)->Arg(300'000)->Unit(benchmark::kMillisecond)->Iterations(3);

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark names
void BM_CompareTwo1MRuns(benchmark::State& state) {
  const std::string path = (scratch() / "compare.sqlite").string();
  removeDb(path);
  auto store = HistoryStore::open(path);
  if (!store) {
    state.SkipWithError(store.message().c_str());
    return;
  }
  auto a = store->ingestStream(stream1M());
  auto b = store->ingestStream(stream1M());
  if (!a || !b) {
    state.SkipWithError("ingest failed");
    return;
  }
  for (auto _ : state) {
    auto c = compareRuns(*store, *a, *b);
    if (!c) state.SkipWithError(c.message().c_str());
    benchmark::DoNotOptimize(c);
  }
  state.SetItemsProcessed(state.iterations() * 2'000'000);
}
BENCHMARK(BM_CompareTwo1MRuns)->Unit(benchmark::kMillisecond)->Iterations(3);

// NOLINTNEXTLINE(readability-identifier-naming): Google Benchmark names
void BM_IdleBreakdown1M(benchmark::State& state) {
  const std::string path = (scratch() / "idle.sqlite").string();
  removeDb(path);
  auto store = HistoryStore::open(path);
  auto a = store ? store->ingestStream(stream1M()) : Expected<RunId>(Error{"open failed"});
  if (!a) {
    state.SkipWithError("ingest failed");
    return;
  }
  for (auto _ : state) {
    auto idle = idleBreakdown(*store, *a);
    benchmark::DoNotOptimize(idle);
  }
  state.SetItemsProcessed(state.iterations() * 1'000'000);
}
BENCHMARK(BM_IdleBreakdown1M)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(scratch(), ec);
  return 0;
}
