// pipestudio-test-rank: a stand-in for pipestudio-exec's `cuda` backend on machines without a
// GPU, for the launcher tests. Several ranks that hand rank 0's NCCL id over need one process
// per rank, which the CPU backend (one process driving every device) never starts. `--task`
// is the real relay of pipestudio-exec (executor/Launcher.cpp); the rest writes a real trace
// stream: rank 0 a fresh random NCCL id, every other rank the id it was given (so a test can
// see that it arrived), op ranges for a few iterations, and a summary.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pipestudio/executor/Launcher.hpp"
#include "pipestudio/trace/Stream.hpp"

namespace {

using namespace pipestudio;

void emit(const trace::Frame& frame) {
  std::string bytes;
  trace::encodeFrame(frame, bytes);
  (void)::write(STDOUT_FILENO, bytes.data(), bytes.size());
}

std::string fromHex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--task") return exec::taskMain(argc, argv);
  int rank = 0;
  int world = 1;
  int iterations = 2;
  std::string ncclId;
  std::string runId;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rank")
      rank = std::atoi(argv[++i]);
    else if (a == "--world")
      world = std::atoi(argv[++i]);
    else if (a == "--iterations")
      iterations = std::atoi(argv[++i]);
    else if (a == "--nccl-id")
      ncclId = argv[++i];
    else if (a == "--run-id")
      runId = argv[++i];
  }
  std::string start;
  trace::encodeStreamStart(start);
  (void)::write(STDOUT_FILENO, start.data(), start.size());
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  trace::Header header;
  header.runId = runId;
  header.rank = rank;
  header.world = world;
  header.host = host;
  header.backend = "cuda";
  header.deviceName = "pipestudio-test-rank";
  emit(header);
  trace::NcclId id;
  if (rank == 0) {
    std::random_device seed;
    std::mt19937_64 rng(seed());
    for (int i = 0; i < 128; ++i) id.bytes.push_back(static_cast<char>(rng()));
  } else if (ncclId.size() == 256) {
    id.bytes = fromHex(ncclId);
  } else {
    std::cerr << "pipestudio-test-rank: rank " << rank << ": no --nccl-id from rank 0\n";
    emit(trace::ErrorReport{rank, "no NCCL id"});
    trace::Summary failed;
    failed.ok = false;
    emit(failed);
    return 1;
  }
  emit(id);
  std::cerr << "pipestudio-test-rank: rank " << rank << " of " << world << " on " << host << '\n';
  const auto t0 = std::chrono::steady_clock::now();
  auto nowNs = [&] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  };
  trace::Summary summary;
  for (int it = 0; it < iterations; ++it) {
    const std::int64_t begin = nowNs();
    emit(trace::OpRange{true, rank, rank, OpKind::F, 0, it, begin, begin});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::int64_t end = nowNs();
    emit(trace::OpRange{false, rank, rank, OpKind::F, 0, it, begin, end});
    summary.iterationMs.push_back(static_cast<double>(end - begin) / 1e6);
  }
  summary.iterations = iterations;
  summary.elapsedNs = nowNs();
  emit(summary);
  return 0;
}
