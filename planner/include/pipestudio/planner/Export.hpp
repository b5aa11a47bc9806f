#pragma once
/// \file Exports and imports of timed plans and measured runs: Chrome trace JSON (Perfetto,
/// chrome://tracing), schedule CSV in the `torch.distributed.pipelining` formats (compute-only and
/// compute+comms), Megatron-LM command-line arguments and torchtitan configurations (Python for
/// torchtitan main, TOML for v0.2.2 and earlier).
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
#include "pipestudio/planner/Request.hpp"

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
/// where `_PipelineScheduleRuntime._prepare_schedule_with_comms` places them (a plan with its own
/// FSDP actions, Plan::fsdpActions, keeps those and gets the sends and receives around them). The order is
/// checked with `_validate_schedule`'s rules first (validateTorchSchedule). Ops PyTorch cannot
/// express (N, S, T, OPT, partial batches, a bidirectional model) give an Error naming the op.
Expected<std::string> scheduleCsv(const Plan& plan, CsvFormat format = CsvFormat::ComputeOnly);
Status writeScheduleCsv(const std::string& path, const Plan& plan, CsvFormat format = CsvFormat::ComputeOnly);

/// The checks `torch.distributed.pipelining`'s `_validate_schedule` applies to a plan's order,
/// with our messages: one row per rank, every stage on one rank, F before I or B and I before W
/// for each (stage, microbatch), and per stage F for every microbatch, as many I as W, and
/// B + I = microbatches.
Status validateTorchSchedule(const Plan& plan);

/// Which Megatron-LM model the arguments build. Megatron-LM deprecated GPTModel for HybridModel
/// (NVIDIA/Megatron-LM 10cd30c0b2, #5911, 2026-07-27): `pretrain_hybrid.py` with
/// `--hybrid-layer-pattern`, one symbol per attention or MLP layer and `|` between pipeline
/// segments, replaces `--num-layers`, `--num-virtual-stages-per-pipeline-rank` and
/// `--pipeline-model-parallel-layout`. `Gpt` writes GPTModel's flags (`pretrain_gpt.py`) for
/// Megatron-LM before that commit, and the Zero Bubble fork always gets them.
enum class MegatronModel { Hybrid, Gpt };
std::optional<MegatronModel> megatronModelFromName(std::string_view name);  ///< hybrid | gpt
std::string_view megatronModelName(MegatronModel model);

struct MegatronOptions {
  MegatronModel model = MegatronModel::Hybrid;
};

/// Megatron-LM's command line for the plan: parallel sizes, batch sizes, the layer split
/// (`--hybrid-layer-pattern` segments for HybridModel; the virtual-pipeline size or
/// `--pipeline-model-parallel-layout` for GPTModel), the model's architecture (norm, position
/// embedding, biases, GQA, MLA, MoE, MTP, windows), recomputation, the distributed optimizer or
/// Megatron-FSDP (ZeRO-2/3: `--use-megatron-fsdp`), and the Zero Bubble fork's flags for
/// zero-bubble schedules (only flags the fork's arguments.py has). `text` is a commented shell
/// fragment (one flag per line); `arguments` the flags alone. Refuses, with the reason, what
/// Megatron cannot express (GPipe, bidirectional schedules, custom orders, frozen-component fill,
/// layers that are not embedding/transformer/lm_head, what the fork lacks).
struct MegatronExport {
  std::vector<std::string> arguments;
  std::string layout;         ///< GPTModel: the layout string, empty when the even split is the plan's
  std::string hybridPattern;  ///< HybridModel: the --hybrid-layer-pattern value
  MegatronModel model = MegatronModel::Hybrid;  ///< what `arguments` build (the fork: Gpt)
  std::string text;
  /// Flags Megatron's argument check requires that the plan cannot supply (a model of measured
  /// times has no hidden size, heads or sequence length); `text` names them in a comment.
  std::vector<std::string> missingArguments;
};
Expected<MegatronExport> megatronExport(const Plan& plan, const MegatronOptions& options = {});

/// Megatron-Core's layout grammar: stages split by `|`, `E` embedding, `t` decoder layer, `L`
/// loss (with the output layer), `m` MTP layer, `x*n` and `(...)*n` repeats, commas ignored.
/// Returns the stages' symbols in order (index = virtual rank · P + pipeline rank).
Expected<std::vector<std::string>> parseMegatronLayout(std::string_view layout);

/// Megatron-Core's hybrid layer pattern (megatron/core/models/hybrid/hybrid_layer_allocation.py):
/// the main pattern, split at `|` into pipeline segments (index = virtual rank · P + pipeline
/// rank), then `/` and the pattern of one multi-token-prediction depth, once per depth. Symbols:
/// `*` attention, `+` multi-head latent attention, `D` DeepSeek sparse attention, `-` MLP, `E`
/// mixture of experts, `M` Mamba, `G` gated delta net. Megatron's rules: every MTP depth the same
/// pattern, no `|` in it, `*` never beside `+` or `D`.
struct HybridPattern {
  std::vector<std::string> segments;
  std::string mtp;  ///< one MTP depth's layers; empty without MTP
  int mtpDepths = 0;
};
Expected<HybridPattern> parseHybridPattern(std::string_view pattern);
/// The pattern text: segments joined by `|`, then `/mtp` per depth. renderHybridPattern(parse(s)) == s.
std::string renderHybridPattern(const HybridPattern& pattern);

/// torchtitan's configuration formats. torchtitan main selects a run with `--module` /
/// `--config`, a Python function returning `Trainer.Config` (pytorch/torchtitan 9810191b, Feb
/// 2026); v0.2.2 and earlier read TOML job configs (`--job.config_file`).
enum class TorchtitanFormat { Python, Toml };
std::optional<TorchtitanFormat> torchtitanFormatFromName(std::string_view name);  ///< python | toml

struct TorchtitanOptions {
  TorchtitanFormat format = TorchtitanFormat::Python;
  /// The schedule CSV written beside the configuration: TOML names this path, Python the file
  /// of that name beside itself.
  std::string csvPath;
  /// Python: `module:function` of the configuration the plan starts from (model, tokenizer,
  /// data, optimizer); empty: the one torchtitan ships for the plan's model, if any (else the
  /// file asks for $PIPESTUDIO_TORCHTITAN_BASE).
  std::string base;
  std::string moduleName;  ///< Python: the module name the launch line uses (the file's stem)
};

/// torchtitan's settings for the plan and the compute-only schedule CSV they name (run by
/// `_PipelineScheduleRuntime`). Both formats set the pipeline (degree, placement style, the CSV,
/// microbatches, module names per stage), TP/CP/EP/DP degrees and FSDP resharding, the batch and
/// activation checkpointing. Module names: embedding → `tok_embeddings`, the k-th transformer
/// layer → `layers.k`, lm_head → `norm` and `lm_head` (Python; `output` in TOML, v0.2.2's
/// name). Refused with the reason: what torchtitan cannot place or run (see
/// requireSingleBackbone), ZeRO-1, TP without sequence parallelism, and MoE layouts torchtitan
/// cannot build as costed: its expert-parallel ranks come from FSDP·CP·TP (the expert FSDP
/// degree dp_shard·cp·tp / (etp·ep) must be whole), TOML writes expert_tensor_parallel_degree =
/// TP (our costs split experts over TP), and main, which has no expert TP, refuses MoE with TP > 1.
struct TorchtitanExport {
  TorchtitanFormat format = TorchtitanFormat::Python;
  std::string config;  ///< the Python module or the TOML fragment
  std::string toml;    ///< `config` when the format is TOML (empty otherwise)
  std::string csv;
  std::vector<std::vector<std::string>> moduleFqnsPerModelPart;
  std::vector<std::string> notes;  ///< what the user must still supply (said by the CLI and the GUI)
};
Expected<TorchtitanExport> torchtitanExport(const Plan& plan, const TorchtitanOptions& options);
/// The TOML job config (torchtitan v0.2.2 and earlier) naming `csvPath`.
Expected<TorchtitanExport> torchtitanExport(const Plan& plan, const std::string& csvPath);
/// Whether `name` can be the module torchtitan imports the Python configuration as (`--module
/// NAME`, the file's stem): a Python identifier.
bool isPythonIdentifier(std::string_view name);

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
  /// The stages are FSDP modules (ZeRO-3): a compute_comms file's UNSHARD / RESHARD / REDUCE_GRAD
  /// are checked as PyTorch's runtime checks them.
  bool fsdp = false;
};

/// Parses schedule CSV text into per-device op orders. Empty cells (PyTorch writes `None` steps
/// as empty strings) are skipped. `(0F7;7B3)OVERLAP_F_B` gives its two ops back to back (the plan
/// overlaps them when PlanConfig::overlapForwardBackward is set: csvHasOverlappedPairs). The
/// compute_comms cells SEND_F/RECV_F/SEND_B/RECV_B are checked (stage on that row, microbatch in
/// range) and give no op: the plan's transfers follow from its data flow. UNSHARD, RESHARD and
/// REDUCE_GRAD become the skeleton's fsdpActions (under ZeRO-3: one gather per window, one
/// gradient reduce-scatter per stage); with `shape.fsdp` a compute_comms file's actions must pass
/// the checks of PyTorch's runtime (no pass on a sharded stage, no double UNSHARD, no RESHARD
/// without a pass since the UNSHARD, none left unsharded or unused at the end of the row) and
/// every stage needs one REDUCE_GRAD after its last W or B.
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

/// Whether the CSV text has FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD): its plan then sets
/// PlanConfig::fsdpWindows.
bool csvHasFsdpActions(std::string_view text);

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
