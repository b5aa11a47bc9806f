#pragma once
// Shared fixtures for the history tests: temporary directories, a small plan and an
// executor-like trace stream that runs it.

#include <filesystem>
#include <string>
#include <vector>

#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/history/TraceImport.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "support/ExpectedMatchers.hpp"

namespace pipestudio::history::testing {

using ::pipestudio::test::HasError;
using ::pipestudio::test::HasValue;

/// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (m_path / name).string(); }
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
};

/// 2 devices, 2 virtual stages, 2 microbatches, F/B/W ops of 1 ms each in a 1F1B-like order.
Plan smallPlan();

/// The planner's plan of `layers` (model "t", one component "backbone") on `devices` GPUs of
/// one node linked at 100 GB/s and 5 µs, partitioned uniformly; a refusal fails the test.
Plan plannedPlan(std::vector<Layer> layers, const std::string& schedule, int devices, int microbatches);

/// The first column of the first row `sql` returns on the store's connection, -1 without a row; a
/// statement that does not prepare fails the test.
std::int64_t queryInt(HistoryStore& store, const std::string& sql);

/// Stores `plan` (named `name`) and imports `files` as a run of it, timed against it.
Expected<TraceImportResult> importAgainstPlan(HistoryStore& store, const Plan& plan,
                                              const std::vector<std::string>& files, const std::string& name = {});

/// history.sqlite in `dir`, opened; a failure fails the test.
HistoryStore openStore(const TempDir& dir);

/// What the built pipestudio-cli printed and how it exited.
struct CliResult {
  int exitCode = -1;  ///< -1 where it could not run (or the build has no CLI)
  std::string out;
  std::string err;
};

/// Runs pipestudio-cli with `args` (and `env`, "NAME=value …", in its environment); its stderr
/// passes through a file in `dir`.
CliResult cli(const TempDir& dir, const std::string& args, const std::string& env = {});

struct StreamOptions {
  int iterations = 2;
  int rank = 0;
  double slowdown = 1.0;           ///< measured durations = planned × slowdown
  std::int64_t launchDelayNs = 0;  ///< added to every op start (host wait)
  bool withSummary = true;
  bool summaryOk = true;
  bool withKernels = true;
  std::int64_t wallClockNs = 1'700'000'000'000'000'000;
};

/// The frames an executor would send running `plan`: header, op ranges (begin + end),
/// one kernel per op, an NCCL activity before each cross-device op, memory samples, summary.
std::vector<trace::Frame> executorFrames(const Plan& plan, const StreamOptions& options = {});

/// A binary stream with `events` events (kernels and ops), for large tests and benches.
std::string largeStream(std::int64_t events, int devices = 4);

std::string readFile(const std::string& path);
void writeFile(const std::string& path, const std::string& text);

}  // namespace pipestudio::history::testing
