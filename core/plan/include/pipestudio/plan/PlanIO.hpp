#pragma once
/// \file Plan documents: load with full validation, save.

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/common/JsonReader.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio {

Expected<Plan> loadPlan(const std::string& path);
std::optional<Plan> readPlan(JsonReader& reader, const JsonNode& at);
Json planToJson(const Plan& plan);
/// A device's memory breakdown as the plan document writes it: one `<part>_bytes` key per line
/// of memoryParts() and `margin_bytes`, the kept-back lines together.
Json memoryBreakdownJson(const MemoryBreakdown& memory);
/// A plan document's `config` object (every setting that makes two plans differ, but
/// `vocab_barriers`, which planToJson adds for plans with vocabulary passes).
Json configToJson(const PlanConfig& config);
/// The training-recipe fields of a config object (issue 25: precision, overlap_param_gather,
/// tp_comm_overlap, grad_reduce_dtype, recompute_num_layers/method/modules), shared by plan files
/// and workspaces; absent keys keep PlanConfig's defaults (Megatron-Bridge's).
void readRecipeFields(JsonReader& reader, const JsonNode& config, PlanConfig& out);
void writeRecipeFields(const PlanConfig& config, Json& out);
/// The parallel degrees (tp, cp, ep, dp), sequence_parallel, recompute and zero, always written:
/// the keys plan files and workspaces share, in their order.
void writeParallelDegrees(const Parallelism& parallel, Json& out);
/// `seq_split` (balanced or even) of a config object into PlanConfig::seqSplit, when present.
void readSeqSplit(JsonReader& reader, const JsonNode& config, PlanConfig& out);
/// `own` followed by every key readRecipeFields reads: the known keys of a config object that
/// holds the recipe fields (JsonReader::rejectUnknown), so plan files and workspaces accept the
/// same recipe keys.
std::vector<std::string_view> withRecipeFieldKeys(std::initializer_list<std::string_view> own);
/// Writes the plan document to `path` (writeOutputFile rules), streaming ops and comms one per
/// line: no document-sized JSON tree is built.
Status savePlan(const std::string& path, const Plan& plan);
/// The same document on a stream.
bool writePlanJson(std::ostream& out, const Plan& plan);

/// The one plan validator `validate`, `simulate`, `run`, `export` and pipestudio-exec share
/// (loadPlan applies it): the devices fit the plan's cluster; sizes within kMaxPlanOps;
/// virtual stages in id order on devices of the plan, with a component and a layer range of
/// it; every op on its stage's device, of a known kind, with a microbatch of the plan, finite
/// ordered times, no backward on a frozen component, no duplicate; every op's inputs in the
/// plan (F: the previous stage's F; B/BW: its F and the next stage's backward; W: its split B;
/// N: the previous stage's N ops covering its samples); times and transfer sizes within the
/// document's ranges (|t| ≤ 1e12 ms, bytes ≤ 2^50); and per-device orders that run to the end
/// when each device waits for what its next op needs (the derived dependencies included),
/// so no plan that passes deadlocks in the simulator or the executor. The planner's plans
/// pass it too (simulateSkeleton checks them). Messages start with the JSON pointer of the
/// offending entry (e.g. /ops/17).
Status validatePlanStructure(const Plan& plan);

/// Refuses a plan request whose op count (up to 3 per virtual stage and microbatch) would
/// pass kMaxPlanOps, before anything is allocated; the message has the numbers and the limit.
Status checkPlanSize(std::int64_t devices, std::int64_t chunksPerDevice, std::int64_t microbatches);

/// Refuses a plan shape whose per (virtual stage, microbatch) tables (simulator, executor,
/// timeline) would pass kMaxPlanOps entries, before they are allocated: what
/// validatePlanStructure checks of a loaded plan, and runAsPlan of a recorded run.
Status checkStageTables(std::int64_t virtualStages, std::int64_t microbatches);

/// Turns a validatePlanStructure message ("/ops/17/device: …") into
/// "file:line:col: /ops/17/device: …" using the document the plan was read from.
std::string locatePlanProblem(const JsonDocument& doc, const std::string& message);

}  // namespace pipestudio
