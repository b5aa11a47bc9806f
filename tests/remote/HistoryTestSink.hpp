#pragma once
// The sink the CLI uses, in small: one StreamIngest per rank into a real history file, plus
// what the deploy tests look at (when the first bytes arrived, every rank's frames, the log).

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/remote/Deploy.hpp"

namespace pipestudio::remote::test {

class HistoryTestSink : public TraceSink {
 public:
  /// `store` null: frames are only counted and kept (streams that match no plan).
  HistoryTestSink(history::HistoryStore* store, std::string planPath) : m_store(store), m_plan(std::move(planPath)) {}

  Status onStart(int ranks) override {
    if (m_store == nullptr) return Status{};
    auto run = m_store->beginRun(history::RunInfo{"test", "deploy", m_plan, {}, "", "", "cpu", "", ""});
    if (!run) return run.error();
    runId = *run;
    for (int r = 0; r < ranks; ++r) ingest.push_back(std::make_unique<history::StreamIngest>(*m_store, runId));
    return Status{};
  }
  Status onStreamBytes(int rank, std::string_view bytes) override {
    if (!firstBytes) firstBytes = std::chrono::system_clock::now();
    bytesReceived += bytes.size();
    if (m_store == nullptr) return Status{};
    return ingest.at(static_cast<std::size_t>(rank))->feed(bytes);
  }
  void onFrame(int rank, const trace::Frame& frame) override {
    ++frames;
    framesOf[rank].push_back(frame);
  }
  void onLog(int, std::string_view text) override { log.append(text); }
  void onLauncherLog(std::string_view text) override { launcherLog.append(text); }

  Status finish(const DeployResult& r) {
    if (m_store == nullptr) return Status{};
    for (auto& i : ingest) {
      if (auto st = i->flush(); !st) return st;
    }
    const auto status = r.outcome == DeployOutcome::Complete ? history::RunStatus::Complete
                        : r.outcome == DeployOutcome::Failed ? history::RunStatus::Failed
                                                             : history::RunStatus::Incomplete;
    return m_store->finishRun(runId, status, r.message);
  }

  history::RunId runId = 0;
  std::vector<std::unique_ptr<history::StreamIngest>> ingest;
  std::atomic<std::uint64_t> bytesReceived{0};
  std::atomic<int> frames{0};
  std::optional<std::chrono::system_clock::time_point> firstBytes;
  std::map<int, std::vector<trace::Frame>> framesOf;
  std::string log;
  std::string launcherLog;

 private:
  history::HistoryStore* m_store;
  std::string m_plan;
};

}  // namespace pipestudio::remote::test
