#pragma once
// Runs pipestudio-exec on a plan written to a temporary file and collects its frames.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "pipestudio/executor/Launcher.hpp"
#include "pipestudio/plan/PlanIO.hpp"
#include "pipestudio/trace/Stream.hpp"
#include "support/ExpectedMatchers.hpp"

namespace pipestudio::test {

inline std::filesystem::path tempDir() {
  return std::filesystem::temp_directory_path() / ("pipestudio-exec-test-" + std::to_string(::getpid()));
}

// Removes this process's scratch directory when the test program exits.
struct TempDirCleanup {
  ~TempDirCleanup() {
    std::error_code ec;
    std::filesystem::remove_all(tempDir(), ec);
  }
};
inline const TempDirCleanup kTempDirCleanup{};

inline std::string tempPath(const std::string& name) {
  const auto dir = tempDir();
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline std::string writePlan(const Plan& plan, const std::string& name) {
  std::string path = tempPath(name);
  EXPECT_TRUE(savePlan(path, plan).isOk());
  return path;
}

struct RunResult {
  exec::LaunchOutcome outcome;
  std::map<int, std::vector<trace::Frame>> frames;  ///< by rank
};

inline RunResult runExec(const std::string& planPath, const std::string& backend, int iterations,
                         std::vector<std::string> extra = {}, int world = 1) {
  exec::LaunchRequest req;
  // $PIPESTUDIO_EXEC (as pipestudio-cli honours it) lets tests/gpu/run.sh run a carried build.
  const char* carried = std::getenv("PIPESTUDIO_EXEC");
  req.executable = carried != nullptr && *carried != '\0' ? carried : PIPESTUDIO_EXEC_BINARY;
  req.planPath = planPath;
  req.backend = parseBackend(backend).value();  // a test names a real backend
  req.iterations = iterations;
  req.world = world;
  req.extraArgs = std::move(extra);
  req.peerExitTimeoutS = 10;
  RunResult r;
  auto out = exec::launchLocal(req, [&](int rank, const trace::Frame& f) { r.frames[rank].push_back(f); });
  EXPECT_THAT(out, HasValue());
  if (out) r.outcome = *out;
  return r;
}

/// Scoped environment variable (fault injection).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : m_name(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(m_name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* m_name;
};

}  // namespace pipestudio::test
