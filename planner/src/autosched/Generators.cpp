// Generators for `zb-auto` and `custom`. Both need more than a ScheduleShape (zb-auto: its
// options and a place for its report; custom: the CSV text), which makeAutoPlan and
// makeCustomPlan (AutoPlan.cpp) hand over through a per-thread context (ContextScope) around
// makePlan — so the partition, fill, simulation and memory checks stay makePlan's, solver threads
// do not interfere, and the generators that makePlan calls do not depend on it.
#include "autosched/Generators.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pipestudio/common/Files.hpp"
#include "pipestudio/common/Try.hpp"
#include "pipestudio/planner/AutoSchedule.hpp"
#include "pipestudio/planner/Export.hpp"
#include "schedules/Generators.hpp"

namespace pipestudio {
namespace autosched {
namespace {

thread_local Context tContext;

class ZbAuto final : public ScheduleGenerator {
 public:
  std::string_view name() const override { return "zb-auto"; }
  int defaultChunksPerDevice() const override { return 1; }
  bool splitsBackward() const override { return true; }
  Status validate(const ScheduleShape& shape) const override {
    if (shape.devices < 1 || shape.microbatches < 1 || shape.chunksPerDevice < 1) {
      return Error{"zb-auto needs at least one device, microbatch and chunk"};
    }
    return {};
  }
  // One chunk: stage d on device d. More: the V (wave) placement of ZB-V, so consecutive chunks
  // meet on one device and the turn costs no transfer.
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    if (shape.chunksPerDevice == 1) return schedules::linearPlacement(shape.devices, 1);
    return schedules::wavePlacement(shape.devices, shape.chunksPerDevice);
  }
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    const AutoScheduleOptions defaults;
    PS_ASSIGN_OR_RETURN(auto result, autoSchedule(input, tContext.options ? *tContext.options : defaults));
    if (tContext.report) *tContext.report = result.report;
    return std::move(result.skeleton);
  }
};

class Custom final : public ScheduleGenerator {
 public:
  std::string_view name() const override { return "custom"; }
  // An imported order's microbatch numbers are units when the request splits the sequence.
  bool splitsSequence() const override { return true; }
  int defaultChunksPerDevice() const override { return 1; }
  bool splitsBackward() const override { return true; }
  // PyTorch's runtime runs an OVERLAP_F_B pair as its F then its B, each when its own input is
  // there (runtime.py _step_microbatches: one _perform_action per sub-action), which is how the
  // simulator times two ops in order. The request's PlanConfig::overlapForwardBackward (plan
  // --overlap-f-b) times them as one overlapped group instead, as a custom function registered for
  // OVERLAP_F_B (DualPipe's F&B) runs them. UNSHARD/RESHARD/REDUCE_GRAD cells are FSDP windows: the
  // costs keep the ZeRO-3 gathers apart.
  void configure(PlanConfig& config) const override {
    if (tContext.csv && csvHasFsdpActions(*tContext.csv)) config.fsdpWindows = true;
  }
  Status validate(const ScheduleShape& shape) const override {
    if (tContext.csv == nullptr) {
      return Error{"custom: the order comes from a schedule CSV (pipestudio-cli plan --schedule custom --csv FILE)"};
    }
    PS_RETURN_IF_ERROR(parseInferred(shape));
    return {};
  }
  std::vector<VirtualStage> placement(const ScheduleShape& shape) const override {
    auto parsed = parseInferred(shape);
    return parsed ? parsed->virtualStages : std::vector<VirtualStage>{};
  }
  Expected<ScheduleSkeleton> order(const ScheduleInput& input) const override {
    if (tContext.csv == nullptr) return Error{"custom: no schedule CSV given"};
    CsvScheduleShape shape{input.shape.devices, input.shape.microbatches, input.virtualStages};
    shape.fsdp = input.request && input.request->config.parallel.zeroStage >= 3;
    return parseScheduleCsv(*tContext.csv, shape, tContext.source ? *tContext.source : "<csv>");
  }

 private:
  static Expected<ScheduleSkeleton> parseInferred(const ScheduleShape& shape) {
    if (tContext.csv == nullptr) return Error{"custom: no schedule CSV given"};
    return parseScheduleCsv(*tContext.csv, {shape.devices, shape.microbatches, {}},
                            tContext.source ? *tContext.source : "<csv>");
  }
};

}  // namespace

std::unique_ptr<ScheduleGenerator> makeZbAutoGenerator() { return std::make_unique<ZbAuto>(); }
std::unique_ptr<ScheduleGenerator> makeCustomGenerator() { return std::make_unique<Custom>(); }

ContextScope::ContextScope(const Context& context) : m_saved(tContext) { tContext = context; }
ContextScope::~ContextScope() { tContext = m_saved; }

}  // namespace autosched

Expected<std::string> readScheduleCsvFile(const std::string& path) {
  // Regular files only (a FIFO must not hang), 256 MiB at most; parseScheduleCsv judges the text.
  return readRegularFile(path, std::size_t{256} << 20);
}

}  // namespace pipestudio
