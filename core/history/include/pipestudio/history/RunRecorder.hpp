#pragma once
/// \file Recording one deployment into the history: what `pipestudio-cli deploy` and the GUI's
/// deploy dialog both do with the ranks' trace streams. Qt-free and independent of
/// core/remote: remote::HistorySink (core/remote) gives it to a deployment as its trace sink, and
/// each front end keeps only its own log handling.

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/history/HistoryStore.hpp"

namespace pipestudio::history {

/// One run, one StreamIngest per rank, one final status. Calls come one at a time (the
/// deployment serialises its sink's calls), so one store connection is enough.
///
///     RunRecorder recorder(store, info);
///     recorder.start(ranks);             // when the ranks are about to stream
///     recorder.feed(rank, bytes);        // each chunk of a rank's stream
///     recorder.finish(RunStatus::Complete, message);  // the deployment's verdict
class RunRecorder {
 public:
  RunRecorder(HistoryStore& store, RunInfo info);
  ~RunRecorder();
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  /// Creates the run and one ingest per rank (ranks ≥ 1). Once only.
  Status start(int ranks);
  /// Stores the next bytes of `rank`'s trace stream; an error for a rank outside the run.
  Status feed(int rank, std::string_view bytes);

  bool started() const { return m_run != 0; }
  RunId runId() const { return m_run; }

  /// Flushes every rank and finishes the run: `outcome` is the deployment's own verdict (with
  /// `message`, its reason), made stricter by what the streams say (a missing summary, a
  /// failed rank): a complete deployment whose streams are not stays what the streams say.
  Status finish(RunStatus outcome, std::string_view message);

 private:
  HistoryStore& m_store;
  RunInfo m_info;
  RunId m_run = 0;
  std::vector<std::unique_ptr<StreamIngest>> m_ingest;
};

}  // namespace pipestudio::history
