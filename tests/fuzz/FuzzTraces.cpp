// libFuzzer entry point for the trace readers: the stream decoder, the Chrome/Kineto JSON reader
// (plain and gzip) and the Nsight Systems SQLite reader, each through `history import`'s code
// path into a real history file. Run with
//   build/asan/tests/fuzz/fuzz_traces -dict=tests/fuzz/traces.dict -max_total_time=180 tests/fuzz/corpus/traces
// Any crash, sanitizer report, hang or unbounded allocation is a bug in core/.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "TraceFuzzBody.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipestudio;
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("pipestudio-fuzz-traces-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  static auto store = history::HistoryStore::open((dir / "history.sqlite").string());
  if (!store) std::abort();
  fuzz::fuzzTraceInput(std::string_view(reinterpret_cast<const char*>(data), size), *store,
                       (dir / "input.trace").string());
  return 0;
}
