#pragma once
/// \file Exports and imports of timed plans and measured runs: Chrome trace JSON (Perfetto,
/// chrome://tracing), schedule CSV in the `torch.distributed.pipelining` formats (compute-only and
/// compute+comms), Megatron-LM command-line arguments and torchtitan `[parallelism]` TOML.
/// Every framework export is checked with the rules its consumer applies, so a user reads our
/// message rather than the framework's assertion. Qt-free.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/common/Json.hpp"
#include "pipestudio/plan/Plan.hpp"
#include "pipestudio/planner/Planner.hpp"

namespace pipestudio {

/// A measured kernel (CUPTI) or any other device activity drawn on its own thread of a device's
/// process in the trace; `stream` picks the thread (one per CUDA stream).
struct TraceActivity {
  int device = 0;
  int stream = 0;
  std::string name;
  std::string category = "kernel";  ///< kernel, memcpy, memset, nccl, …
  double startMs = 0;
  double endMs = 0;
};

struct ChromeTraceOptions {
  std::string title;                      ///< shown as trace metadata (plan schedule or run id)
  std::vector<TraceActivity> activities;  ///< measured runs: CUPTI records, drawn per stream
};

/// The Chrome trace document (JSON object format, `displayTimeUnit` ms, timestamps in µs):
/// one complete (`ph: "X"`) event per op with `pid` = device, `tid` 0 and `args {kind,
/// microbatch, virtual_stage, device}`; each transfer on a thread of the sending device named
/// after its link (`send → device N`); process and thread name/sort metadata so lanes are
/// labelled and ordered; activities on threads `stream N`; flow arrows (`ph` s/f, `cat`
/// "dependency") from each op to the ops on other devices that read its output.
Json chromeTraceJson(const Plan& plan, const ChromeTraceOptions& options = {});

/// Writes chromeTraceJson to `path` (compact JSON: traces of 200k ops stay small).
Status writeChromeTrace(const std::string& path, const Plan& plan, const ChromeTraceOptions& options = {});

/// The two CSV layouts `torch.distributed.pipelining` reads (`_PipelineScheduleRuntime._load_csv`).
enum class CsvFormat {
  ComputeOnly,   ///< F, I, W, B per rank (PipelineScheduleMulti._dump_csv)
  ComputeComms,  ///< plus SEND_F/RECV_F/SEND_B/RECV_B, UNSHARD/RESHARD and REDUCE_GRAD, as the runtime lowers it
};
/// How the letters of a CSV are read. Current PyTorch: I input gradient, W weight gradient,
/// B full backward. PyTorch ≈2.5 and the Zero Bubble fork wrote B for the input gradient and BW
/// for the full backward (`legacy`).
enum class CsvDialect { Current, Legacy };
std::optional<CsvFormat> csvFormatFromName(std::string_view name);    ///< compute_only | compute_comms
std::optional<CsvDialect> csvDialectFromName(std::string_view name);  ///< current | legacy

/// The plan's per-device op order as `torch.distributed.pipelining` CSV: row r lists device r's
/// actions, each `<stage><type><microbatch>` with stage = virtual stage id and type F (forward),
/// I (input gradient, our B), W (weight gradient) or B (fused backward, our BW); with
/// CsvFormat::ComputeComms the communication and FSDP/gradient-reduction actions are placed
/// where `_PipelineScheduleRuntime._prepare_schedule_with_comms` places them. The order is
/// checked with `_validate_schedule`'s rules first (validateTorchSchedule). Ops PyTorch cannot
/// express (N, S, T, OPT, partial batches, a bidirectional model) give an Error naming the op.
Expected<std::string> scheduleCsv(const Plan& plan, CsvFormat format = CsvFormat::ComputeOnly);
Status writeScheduleCsv(const std::string& path, const Plan& plan, CsvFormat format = CsvFormat::ComputeOnly);

/// The checks `torch.distributed.pipelining`'s `_validate_schedule` applies to a plan's order,
/// with our messages: one row per rank, every stage on one rank, F before I or B and I before W
/// for each (stage, microbatch), and per stage F for every microbatch, as many I as W, and
/// B + I = microbatches.
Status validateTorchSchedule(const Plan& plan);

/// Megatron-LM's command line for the plan: parallel sizes, batch sizes, the virtual-pipeline
/// or `--pipeline-model-parallel-layout` split, recomputation, the distributed optimizer, and
/// the Zero Bubble fork's flags for zero-bubble schedules. `text` is a commented shell fragment
/// (one flag per line); `arguments` the flags alone. Refuses, with the reason, what Megatron
/// cannot express (GPipe, bidirectional schedules, custom orders, frozen-component fill, ZeRO-2/3,
/// layers that are not embedding/transformer/lm_head).
struct MegatronExport {
  std::vector<std::string> arguments;
  std::string layout;  ///< the layout string, empty when the even split is the plan's
  std::string text;
};
Expected<MegatronExport> megatronExport(const Plan& plan);

/// Megatron-Core's layout grammar: stages split by `|`, `E` embedding, `t` decoder layer, `L`
/// loss (with the output layer), `m` MTP layer, `x*n` and `(...)*n` repeats, commas ignored.
/// Returns the stages' symbols in order (index = virtual rank · P + pipeline rank).
Expected<std::vector<std::string>> parseMegatronLayout(std::string_view layout);

/// torchtitan's `[parallelism]` (with `[training]` batch and `[activation_checkpoint]` settings)
/// for the plan, as a TOML fragment naming `csvPath` for `pipeline_parallel_schedule_csv`, plus
/// that compute-only CSV. Module names: embedding → `tok_embeddings`, the k-th transformer layer
/// → `layers.k`, lm_head → `norm` and `output` (torchtitan's Llama/DeepSeek names).
struct TorchtitanExport {
  std::string toml;
  std::string csv;
  std::vector<std::vector<std::string>> moduleFqnsPerModelPart;
};
Expected<TorchtitanExport> torchtitanExport(const Plan& plan, const std::string& csvPath);

/// What a framework's runtime runs, for `configure --framework`: the schedules and ZeRO stages
/// its export takes without a fork. megatron: upstream Megatron-LM / Megatron-Core (1F1B and
/// interleaved 1F1B; no ZeRO or its distributed optimizer, ZeRO-1); torchtitan: the schedules of
/// torch.distributed.pipelining with DDP or FSDP2 (ZeRO 0, 2, 3). nullopt for another name.
struct FrameworkSpace {
  std::vector<std::string> schedules;
  std::vector<int> zeroStages;
};
std::optional<FrameworkSpace> frameworkSpace(std::string_view framework);

/// Where the actions of a CSV must fit: the virtual stages (placement) and the microbatch count.
struct CsvScheduleShape {
  int devices = 0;
  int microbatches = 0;
  std::vector<VirtualStage> virtualStages;  ///< in id order; empty: infer placement from the CSV
  CsvDialect dialect = CsvDialect::Current;
};

/// Parses schedule CSV text into per-device op orders. Empty cells (PyTorch writes `None` steps
/// as empty strings) are skipped. `(0F7;7B3)OVERLAP_F_B` gives its two ops back to back (the plan
/// overlaps them when PlanConfig::overlapForwardBackward is set: csvHasOverlappedPairs). The
/// compute_comms cells SEND_F/RECV_F/SEND_B/RECV_B and UNSHARD/RESHARD/REDUCE_GRAD are checked
/// (stage on that row, microbatch in range) and give no op: the plan's transfers follow from its
/// data flow, and its ZeRO-3 gathers and gradient reduce-scatters are costed with the passes.
/// A stage may mix full backward B with split I/W, one form per microbatch. Every problem is an
/// Error `source:line:col: what (expected …)`: an unknown action, a stage placed on another
/// device (or out of range), a microbatch out of range, a duplicated op, a missing op, a row
/// count other than `shape.devices` (both numbers named), a microbatch with both B and I/W; a
/// file that reads as the legacy dialect says so and names --csv-dialect legacy.
/// With `shape.virtualStages` empty the placement is inferred (stage → the row it appears in) and
/// returned in the skeleton, one contiguous layer range per stage left to the caller.
Expected<ScheduleSkeleton> parseScheduleCsv(std::string_view text, const CsvScheduleShape& shape,
                                            const std::string& source = "<csv>");

/// Whether the CSV text has overlapped F&B pairs (`(…)OVERLAP_F_B`, PyTorch's DualPipeV).
bool csvHasOverlappedPairs(std::string_view text);

/// Rewrites schedule CSV text from one dialect's letters to the other's (legacy B ↔ I, BW ↔ B);
/// communication and FSDP actions pass through. An unrecognised action is an Error naming the
/// cell (`source:line:col`) and both dialects.
Expected<std::string> convertScheduleCsv(std::string_view text, CsvDialect from, CsvDialect to,
                                         const std::string& source = "<csv>");

/// Reads a CSV file (bounded size) and parses it as parseScheduleCsv does.
Expected<ScheduleSkeleton> loadScheduleCsv(const std::string& path, const CsvScheduleShape& shape);

/// Imports a CSV as the `custom` schedule of an existing plan: the order is checked against the
/// plan's virtual stages and microbatches and re-simulated with the plan's model and cluster.
Expected<Plan> importScheduleCsv(const Plan& base, std::string_view text, const std::string& source = "<csv>",
                                 CsvDialect dialect = CsvDialect::Current);

}  // namespace pipestudio
