#pragma once
// The `uniform` partitioner. Partitioners share this shape: take the placement a schedule
// generator made (device, chunk, pipeline per virtual stage) and fill in component and
// layer ranges; every pipeline of a bidirectional schedule gets the same ranges.

#include <string>
#include <vector>

#include "pipestudio/common/Expected.hpp"
#include "pipestudio/model/Model.hpp"
#include "pipestudio/plan/Plan.hpp"

namespace pipestudio::partition {

/// Spreads the trainable layers evenly over the virtual stages of each pipeline (sizes differ
/// by at most one layer). Trainable components are chained in data-flow order; a virtual stage
/// never spans two components, so each component gets a share of the stages proportional to
/// its layer count (at least one). Frozen components are not placed (bubble filling does).
Expected<std::vector<VirtualStage>> partitionUniform(const ModelSpec& model, std::vector<VirtualStage> placement);

/// `--partition uniform` as users ask for it: the split above, refused when a schedule with
/// several chunks per device (interleaved, V-shaped, bitpipe) would get chunks of unequal
/// size, i.e. when a component's layers are not divisible by its virtual stages. Those
/// schedules' properties (interleaving's bubble, ZB-V's zero bubble at 1F1B memory) assume
/// equal chunks. One chunk per device keeps the near-even split (sizes differ by at most one
/// layer). `schedule` names the schedule in the message.
Expected<std::vector<VirtualStage>> partitionUniformStrict(const ModelSpec& model, std::vector<VirtualStage> placement,
                                                           int devices, const std::string& schedule);

/// `--partition megatron`: the split Megatron-LM runs without a layout string. A decoder's
/// blocks go evenly over the virtual stages, the embedding (leading `embedding` layers) joins the
/// first stage and the output layer (trailing `lm_head` / `norm` layers) the last, as
/// megatron/core/transformer/transformer_block.py's get_num_layers_to_build places them. When the
/// blocks do not divide evenly but blocks plus those layers do, the recipe's
/// `--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split` split is taken
/// (the embedding and the loss count as a layer each: `partitionUniform`). Otherwise the last
/// stages take one block more. One trainable component (a decoder) only.
Expected<std::vector<VirtualStage>> partitionMegatron(const ModelSpec& model, std::vector<VirtualStage> placement);

/// `--megatron-layout`: exactly the split `layout` names (megatronLayoutSplit in Partition.hpp),
/// stage by stage in id order; refused when its stage count is not the placement's.
Expected<std::vector<VirtualStage>> partitionLayout(const ModelSpec& model, std::vector<VirtualStage> placement,
                                                    const std::string& layout);

}  // namespace pipestudio::partition
