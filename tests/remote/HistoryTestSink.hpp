#pragma once
// The sink the CLI and the GUI use (remote::HistorySink: one run, one stream ingest per rank, the
// verdict made stricter by the streams), plus what the deploy tests look at: when the first bytes
// arrived, every rank's frames, the logs.

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/remote/HistorySink.hpp"

namespace pipestudio::remote::test {

class HistoryTestSink : public TraceSink {
 public:
  /// `store` null: frames are only counted and kept (streams that match no plan).
  HistoryTestSink(history::HistoryStore* store, const std::string& planPath) {
    if (store == nullptr) return;
    m_sink.emplace(*store, history::RunInfo{"test", "deploy", planPath, {}, "", "", "cpu", "", ""},
                   [this](int rank, std::string_view text) {
                     (rank == HistorySink::kLauncherRank ? launcherLog : log).append(text);
                   });
  }

  Status onStart(int ranks) override {
    if (!m_sink) return Status{};
    auto st = m_sink->onStart(ranks);
    runId = m_sink->runId();
    return st;
  }
  Status onStreamBytes(int rank, std::string_view bytes) override {
    if (!firstBytes) firstBytes = std::chrono::system_clock::now();
    bytesReceived += bytes.size();
    return m_sink ? m_sink->onStreamBytes(rank, bytes) : Status{};
  }
  void onFrame(int rank, const trace::Frame& frame) override {
    ++frames;
    framesOf[rank].push_back(frame);
  }
  void onLog(int rank, std::string_view text) override {
    if (m_sink) {
      m_sink->onLog(rank, text);
    } else {
      log.append(text);
    }
  }
  void onLauncherLog(std::string_view text) override {
    if (m_sink) {
      m_sink->onLauncherLog(text);
    } else {
      launcherLog.append(text);
    }
  }

  Status finish(const DeployResult& r) { return m_sink ? m_sink->finish(r) : Status{}; }

  history::RunId runId = 0;
  std::atomic<std::uint64_t> bytesReceived{0};
  std::atomic<int> frames{0};
  std::optional<std::chrono::system_clock::time_point> firstBytes;
  std::map<int, std::vector<trace::Frame>> framesOf;
  std::string log;
  std::string launcherLog;

 private:
  std::optional<HistorySink> m_sink;
};

}  // namespace pipestudio::remote::test
