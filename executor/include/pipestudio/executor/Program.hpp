#pragma once
/// \file The plan-walking core shared by every executor backend: a `pipestudio.plan/1` compiled
/// into per-device step lists with explicit cross-device transfers and activation buffers.
/// Everything a backend may refuse (unknown kinds, inconsistent stages, orders that cannot
/// run, memory that cannot fit) is found here, before the first kernel.

#include <cstdint>
#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Index.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::exec {

/// Data that moves between two devices: produced by plan op `producerOp`, consumed by plan op
/// `consumerOp`. The pair (iteration, producerOp, consumerOp) identifies the message.
struct Transfer {
  std::int32_t producerOp = 0;
  std::int32_t consumerOp = 0;
  std::int32_t fromDevice = 0;
  std::int32_t toDevice = 0;
  std::int64_t sizeBytes = 0;
};

/// An activation buffer of the docs/formats.md convention: allocated at an op's start, freed at
/// the end of a later op on the same device.
struct BufferRef {
  std::int32_t buffer = 0;  ///< index into Program::buffers
  std::int64_t sizeBytes = 0;
};

/// Point-to-point operations a rendezvous transport posts together as one group. NCCL's send
/// and receive block the GPU until the peer's matching call runs, and one communicator runs
/// its operations in the order they were issued (NCCL user guide, "Point-to-point
/// communication"), so the order of these groups, not the buffered order of `Step::sends` and
/// `Step::receives`, decides whether a plan can deadlock.
struct CommGroup {
  std::vector<Transfer> sends;
  std::vector<Transfer> receives;
  bool empty() const { return sends.empty() && receives.empty(); }
};

/// One op of one device, in the device's execution order.
struct Step {
  std::int32_t opIndex = 0;  ///< index into plan.ops
  std::int32_t device = 0;
  std::int32_t virtualStage = 0;
  OpKind kind = OpKind::F;
  std::int32_t microbatch = 0;
  std::int32_t samples = 0;         ///< 0 = whole microbatch
  double plannedMs = 0;             ///< end − start in the plan
  std::vector<Transfer> receives;   ///< must have arrived before the op starts
  std::vector<Transfer> sends;      ///< sent once the op has finished
  std::vector<BufferRef> allocate;  ///< at op start
  std::vector<BufferRef> release;   ///< at op end
  /// For rendezvous transports: posted before the op. Its sends come from earlier ops; its
  /// receives may serve later ops (posted early so that no peer waits on a late receive).
  CommGroup rendezvous;
};

struct DeviceProgram {
  std::vector<Step> steps;
  bool hasOptimizerStep = false;         ///< the plan lists an OPT op for this device
  std::int64_t staticBytes = 0;          ///< parameters, gradients, optimizer state (Memory.hpp)
  std::int64_t peakActivationBytes = 0;  ///< in plan order, under the convention
  double trainableParameters = 0;
  CommGroup trailing;  ///< rendezvous operations left after the last op (its sends)
  /// Data for the next iteration that must have arrived when this one ends: frozen outputs
  /// computed in this iteration's bubbles on another device (cross-iteration overlap).
  /// Their `consumerOp` is −1 − this device (there is no consuming op in this iteration).
  std::vector<Transfer> endReceives;
};

struct Program {
  int devices = 0;
  IdVector<DeviceProgram> perDevice;  ///< by device
  std::int64_t bufferCount = 0;
  std::int64_t transferCount = 0;
  std::int64_t stepCount = 0;
};

/// Compiles a validated plan. Errors name the JSON pointer of the op at fault, e.g.
/// "/ops/17: B of virtual stage 2 microbatch 3 runs before its F on device 1".
/// Dependencies (F after the previous virtual stage's F of its pipeline and component, B/BW
/// after the next one's B/BW, W after the local B, a frozen component's N after the previous
/// stage's N covering the same samples, and those of plan/Dependencies.hpp: frozen outputs to
/// their consumers, vocabulary S/T passes) are checked by executing the program abstractly
/// with buffered sends: a plan whose orders wait on each other in a cycle is refused.
Expected<Program> compileProgram(const Plan& plan);

/// Runs the program's rendezvous groups abstractly under NCCL semantics: a group starts when
/// the device's previous group has completed and, if it sends, the op before it has finished;
/// a transfer happens once the groups holding it on both devices have started; a group
/// completes when all its transfers have happened; an op starts when the op before it and the
/// groups holding its receives have completed. Returns an error naming the stuck devices when
/// that cannot finish (what the GPUs would do: hang). compileProgram builds groups that pass.
Status checkRendezvous(const Program& program);

/// Ops of `plan` for one device in execution order (plan order), as plan indices.
std::vector<std::int32_t> deviceOrder(const Plan& plan, int device);

}  // namespace pipestudio::exec
