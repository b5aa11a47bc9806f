#include "pipestudio/history/RunRecorder.hpp"

#include <string>

#include "pipestudio/common/Index.hpp"
#include "pipestudio/common/Try.hpp"

namespace pipestudio::history {

RunRecorder::RunRecorder(HistoryStore& store, RunInfo info) : m_store(store), m_info(std::move(info)) {}

RunRecorder::~RunRecorder() = default;

Status RunRecorder::start(int ranks) {
  if (started()) return Error{"the run " + std::to_string(m_run) + " is already being recorded"};
  if (ranks < 1)
    return Error{"a deployment of " + std::to_string(ranks) + " ranks has nothing to record (expected 1 or more)"};
  PS_ASSIGN_OR_RETURN(auto run, m_store.beginRun(m_info));
  m_run = run;
  for (int r = 0; r < ranks; ++r) m_ingest.push_back(std::make_unique<StreamIngest>(m_store, m_run));
  return {};
}

Status RunRecorder::feed(int rank, std::string_view bytes) {
  if (!inRange(m_ingest, rank)) {
    return Error{"trace bytes from rank " + std::to_string(rank) + ", not a rank of run " + std::to_string(m_run) +
                 " (expected 0.." + std::to_string(static_cast<int>(m_ingest.size()) - 1) + ")"};
  }
  return m_ingest[static_cast<std::size_t>(rank)]->feed(bytes);
}

Status RunRecorder::finish(RunStatus outcome, std::string_view message) {
  if (!started()) return Error{"no run was started, so none can be finished"};
  RunStatus status = outcome;
  std::string why(message);
  Status failure;  // the first flush that could not be written
  for (auto& ingest : m_ingest) {
    if (auto st = ingest->flush(); !st) {
      // Disk full at the last flush: what was committed stays and the run is still marked (it
      // would otherwise stay "running" and read as interrupted), then the failure is returned.
      if (failure) failure = st;
      if (status == RunStatus::Complete) {
        status = RunStatus::Incomplete;
        why = st.message();
      }
      continue;
    }
    if (status == RunStatus::Complete && ingest->suggestedStatus() != RunStatus::Complete) {
      status = ingest->suggestedStatus();
      why = ingest->problem();
    }
  }
  auto finished =
      m_store.finishRun(m_run, status, status == RunStatus::Complete ? std::string_view{} : std::string_view(why));
  if (!failure) return failure;
  return finished;
}

}  // namespace pipestudio::history
