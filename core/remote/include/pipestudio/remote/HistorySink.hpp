#pragma once
/// \file Recording a deployment into the history: the one remote::TraceSink that
/// `pipestudio-cli deploy`, the GUI's deploy dialog and the deploy tests give a Deployment. The
/// recording itself is history::RunRecorder's; a front end keeps only where the logs go.
///
///     remote::HistorySink sink(store, info, [](int rank, std::string_view text) { … });
///     remote::Deployment deployment(request, callbacks, sink);
///     auto result = deployment.run();
///     if (result) sink.finish(*result);   // the verdict, made stricter by the streams

#include <functional>
#include <string_view>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/history/HistoryStore.hpp"
#include "pipestudio/history/RunRecorder.hpp"
#include "pipestudio/remote/Deploy.hpp"

namespace pipestudio::remote {

/// One history run for one deployment: one stream ingest per rank, the final status. The
/// Deployment serialises its sink's calls, so one store connection (the worker's) is enough.
class HistorySink : public TraceSink {
 public:
  /// The rank `log` is called with for the launcher's own lines (srun's, mpirun's).
  static constexpr int kLauncherRank = -2;
  /// Where the ranks' stderr (the executor's log) and the launcher's lines go, as they arrive.
  using Log = std::function<void(int rank, std::string_view text)>;

  HistorySink(history::HistoryStore& store, history::RunInfo info, Log log);

  Status onStart(int ranks) override { return m_recorder.start(ranks); }
  Status onStreamBytes(int rank, std::string_view bytes) override { return m_recorder.feed(rank, bytes); }
  void onLog(int rank, std::string_view text) override { m_log(rank, text); }
  void onLauncherLog(std::string_view text) override { m_log(kLauncherRank, text); }

  bool started() const { return m_recorder.started(); }
  history::RunId runId() const { return m_recorder.runId(); }

  /// Finishes the run with the deployment's verdict, made stricter by what the streams say.
  Status finish(const DeployResult& result);

 private:
  history::RunRecorder m_recorder;
  Log m_log;
};

}  // namespace pipestudio::remote
