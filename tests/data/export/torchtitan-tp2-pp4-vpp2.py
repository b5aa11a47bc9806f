"""torchtitan configuration for the interleaved-1f1b plan of lm (pipestudio-cli export --format torchtitan).

torchtitan selects a run with --module and --config (Python configurations, since pytorch/torchtitan
9810191b, Feb 2026). From the torchtitan repository root, with this file's folder on PYTHONPATH:

    PYTHONPATH=/path/to/this/folder NGPU=8 MODULE=pp4 CONFIG=pipestudio_plan ./run_train.sh

(T=2 x C=1 x P=4 x D=1 = 8 GPUs; over several nodes,
torchrun -m torchtitan.train with the same --module and --config.)

The plan starts from BASE, a configuration function ("module:function") that gives the model,
tokenizer, data and optimizer; it sets the pipeline and its schedule (pp4.csv beside this
file), the parallel degrees, the batch and activation checkpointing.
"""
import importlib
import os

from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.trainer import Trainer

BASE = os.environ.get("PIPESTUDIO_TORCHTITAN_BASE", "")
SCHEDULE_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pp4.csv")


def pipestudio_plan() -> Trainer.Config:
    module, _, function = BASE.partition(":")
    if not module or not function:
        raise ValueError(
            "set PIPESTUDIO_TORCHTITAN_BASE to the configuration of lm as module:function "
            "(e.g. torchtitan.models.llama3.config_registry:llama3_8b); its layers must be the plan's"
        )
    config = getattr(importlib.import_module(module), function)()

    parallelism = config.parallelism
    parallelism.pipeline_parallel_degree = 4
    # the stage placement (looped); the order is the CSV
    parallelism.pipeline_parallel_schedule = "PipelineScheduleMulti"
    parallelism.pipeline_parallel_schedule_csv = SCHEDULE_CSV
    parallelism.num_pp_microbatches = 8
    parallelism.module_fqns_per_model_part = [
        ["tok_embeddings", "layers.0", "layers.1"],  # stage 0 on rank 0
        ["layers.2", "layers.3"],  # stage 1 on rank 1
        ["layers.4", "layers.5"],  # stage 2 on rank 2
        ["layers.6", "layers.7"],  # stage 3 on rank 3
        ["layers.8", "layers.9"],  # stage 4 on rank 0
        ["layers.10", "layers.11"],  # stage 5 on rank 1
        ["layers.12", "layers.13"],  # stage 6 on rank 2
        ["layers.14", "layers.15", "norm", "lm_head"],  # stage 7 on rank 3
    ]
    parallelism.tensor_parallel_degree = 2
    parallelism.enable_sequence_parallel = True
    parallelism.context_parallel_degree = 1
    parallelism.expert_parallel_degree = 1
    parallelism.data_parallel_replicate_degree = 1
    parallelism.data_parallel_shard_degree = 1

    training = config.training
    training.disable_cuda_graphs = True  # torchtitan's CUDA graphs do not run pipeline parallelism
    # the model has measured times: the sequence length is the base configuration's
    training.num_tokens_per_microbatch_per_dp_rank = 1 * training.max_context_length
    # global batch 8 sequences: 8 microbatches x 1 data-parallel rank(s)
    training.num_tokens_per_train_step = training.num_tokens_per_microbatch_per_dp_rank * 8

    config.activation_checkpoint = None
    return config
