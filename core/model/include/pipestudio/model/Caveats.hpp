#pragma once
/// \file What the cost model leaves out that published runs show to matter, for one model and
/// recipe. The planner prints each one as a note beside its prediction (`plan`'s summary, the
/// `notes` of `--json`, the Metrics dock); docs/fidelity.md has the runs behind every figure.
///
///     for (const std::string& note : costModelCaveats(plan.model, plan.config.parallel)) …

#include <string>
#include <vector>

#include "pipestudio/model/Model.hpp"
#include "pipestudio/model/Parallelism.hpp"

namespace pipestudio {

/// Whether a MoE layer drops tokens and pads every expert to its capacity (static shapes): the
/// recipe's capacity factor for every layer (0 there: dropless), else the layer's own.
bool moeDropsAndPads(const TransformerShape& block, const Parallelism& parallel);

/// Whether a MoE layer's dispatch waits on the host for its token counts (Megatron-LM d98e8a64):
/// the all-to-all dispatcher unless it drops and pads (token_dispatcher.py: its split sizes,
/// copied at `cuda_dtoh_point` and waited for at `cuda_sync_point`; "no_sync" with
/// drop_and_pad), DeepEP (fused_a2a.py: the received counts come back as a host list) and HybridEP
/// without a rank budget (`--moe-expert-rank-capacity-factor`; `_HybridEPManager.setup_metadata`).
bool moeDispatchWaitsOnHost(const Parallelism& parallel, bool dropsAndPads);

/// One sentence per effect the cost model does not time and published runs of this kind of
/// model and recipe show (none for most plans), each with its measured size:
/// - MoE layers whose dispatch waits on the host, in a step that is not one CUDA graph:
///   Megatron-Core's host work;
/// - attention sinks (GPT-OSS): every published GPT-OSS-120B run is slower than predicted.
std::vector<std::string> costModelCaveats(const ModelSpec& model, const Parallelism& parallel);

}  // namespace pipestudio
