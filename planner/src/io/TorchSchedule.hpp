#pragma once
// The schedule IR of torch.distributed.pipelining (schedules.py: _Action, _ComputationType):
// per rank a list of actions `<stage><type>[<microbatch>]`. Our virtual stage ids are its stage
// indices and our devices its pipeline ranks. Shared by the CSV writer, the compute+comms
// lowering and the checks every PyTorch-facing export runs.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::torchpp {

enum class ActionType : std::uint8_t {
  F,
  I,
  W,
  B,
  SendF,
  RecvF,
  SendB,
  RecvB,
  Unshard,
  Reshard,
  ReduceGrad,
  OverlapFB,
};

struct Action {
  int stage = 0;
  ActionType type = ActionType::F;
  int microbatch = -1;      ///< -1: none (UNSHARD, RESHARD, REDUCE_GRAD, OVERLAP_F_B)
  std::vector<Action> sub;  ///< OVERLAP_F_B: the forward and the backward it overlaps, in order
  friend bool operator==(const Action&, const Action&) = default;
};

/// PyTorch's spelling of the type (F, I, W, B, SEND_F, OVERLAP_F_B, …).
const char* typeName(ActionType type);
/// `2F0`, `1UNSHARD`, `3SEND_F1`, `(0F7;7B3)OVERLAP_F_B` (_Action.__repr__).
std::string toString(const Action& action);
/// F, I, W, B and OVERLAP_F_B (_Action.is_compute_op).
bool isCompute(ActionType type);

using RankOrder = IdVector<std::vector<Action>>;  ///< [rank] → actions in order

/// The plan's compute actions per device (F → F, B → I, W → W, BW → B). A plan that overlaps
/// forward and backward (PlanConfig::overlapForwardBackward) writes each overlapped group as
/// OVERLAP_F_B: its F and its backward (a B followed by its W in the group: the full backward B;
/// a B alone: I). Errors name the first op PyTorch has no action for.
Expected<RankOrder> computeOrder(const Plan& plan);

/// _validate_schedule's rules with our messages (see Export.hpp validateTorchSchedule).
Status validate(const RankOrder& order, int ranks, int stages, int microbatches);

/// _PipelineScheduleRuntime's lowering of a compute-only order: FSDP unshard/reshard around
/// the stages about to compute (_add_unshard_reshard, three stages ahead), REDUCE_GRAD after a
/// stage's last W or B (_add_reduce_grad), then sends after the producing action and receives
/// placed on the consuming rank when the send is placed, ranks visited round-robin and an
/// action placed only once its input has arrived (_add_send_recv). Error when no rank can
/// proceed (a malformed order).
/// `runtimePasses` false skips the unshard/reshard and reduce-grad passes (_add_send_recv alone).
Expected<RankOrder> lowerWithComms(const RankOrder& computeOnly, const std::function<int(int)>& stageToRank, int stages,
                                   int microbatches, bool runtimePasses = true);

/// CSV text of an order as Python's csv.writer writes it (CRLF rows, one per rank).
std::string csvText(const RankOrder& order);

}  // namespace pipestudio::torchpp
