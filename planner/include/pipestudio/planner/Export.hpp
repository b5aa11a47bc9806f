#pragma once
/// \file Exports and imports of timed plans and measured runs: Chrome trace JSON (Perfetto,
/// chrome://tracing) and schedule CSV in the `torch.distributed.pipelining` compute-only format.
/// Qt-free.

#include <cstdint>
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
/// labelled and ordered; activities on threads `stream N`.
Json chromeTraceJson(const Plan& plan, const ChromeTraceOptions& options = {});

/// Writes chromeTraceJson to `path` (compact JSON: traces of 200k ops stay small).
Status writeChromeTrace(const std::string& path, const Plan& plan, const ChromeTraceOptions& options = {});

/// The plan's per-device op order as `torch.distributed.pipelining` compute-only CSV
/// (`PipelineScheduleMulti._dump_csv` / `_load_csv`): row r lists device r's actions, each
/// `<stage><type><microbatch>` with stage = virtual stage id and type F (forward), I (input
/// gradient, our B), W (weight gradient) or B (fused backward, our BW). Ops PyTorch cannot
/// express (N, S, T, OPT, partial batches) give an Error naming the op.
Expected<std::string> scheduleCsv(const Plan& plan);
Status writeScheduleCsv(const std::string& path, const Plan& plan);

/// Where the actions of a CSV must fit: the virtual stages (placement) and the microbatch count.
struct CsvScheduleShape {
  int devices = 0;
  int microbatches = 0;
  std::vector<VirtualStage> virtualStages;  ///< in id order; empty: infer placement from the CSV
};

/// Parses schedule CSV text into per-device op orders. Empty cells (PyTorch writes `None` steps
/// as empty strings) are skipped. Every problem is an Error `source:line:col: what (expected …)`:
/// an unknown action, a stage placed on another device (or out of range), a microbatch out of
/// range, a duplicated op, a missing op, too many rows, mixing fused B with I/W for one stage.
/// With `shape.virtualStages` empty the placement is inferred (stage → the row it appears in) and
/// returned in the skeleton, one contiguous layer range per stage left to the caller.
Expected<ScheduleSkeleton> parseScheduleCsv(std::string_view text, const CsvScheduleShape& shape,
                                            const std::string& source = "<csv>");

/// Reads a CSV file (bounded size) and parses it as parseScheduleCsv does.
Expected<ScheduleSkeleton> loadScheduleCsv(const std::string& path, const CsvScheduleShape& shape);

/// Imports a CSV as the `custom` schedule of an existing plan: the order is checked against the
/// plan's virtual stages and microbatches and re-simulated with the plan's model and cluster.
Expected<Plan> importScheduleCsv(const Plan& base, std::string_view text, const std::string& source = "<csv>");

}  // namespace pipestudio
