#include "pipestudio/remote/HistorySink.hpp"

#include <utility>

namespace pipestudio::remote {

HistorySink::HistorySink(history::HistoryStore& store, history::RunInfo info, Log log)
    : m_recorder(store, std::move(info)), m_log(std::move(log)) {}

Status HistorySink::finish(const DeployResult& result) {
  const history::RunStatus status = result.outcome == DeployOutcome::Complete     ? history::RunStatus::Complete
                                    : result.outcome == DeployOutcome::Incomplete ? history::RunStatus::Incomplete
                                                                                  : history::RunStatus::Failed;
  return m_recorder.finish(status, result.message);
}

}  // namespace pipestudio::remote
