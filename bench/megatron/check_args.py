#!/usr/bin/env python3
"""Runs Megatron-LM's own argument parser and checks on arguments `pipestudio-cli export --format
megatron` wrote, and prints what Megatron made of them as one JSON document.

Megatron's `megatron/` package comes from a local copy (see megatron_reference.py: reference/
megatron-lm/ for mainline, reference/zero-bubble-megatron/ for the Zero Bubble fork, which git
ignores). The script runs parse_args and validate_args (megatron/training/arguments.py), then builds
the TransformerConfig the training script would (core_transformer_config_from_args, whose
__post_init__ checks the model), and reports, per pipeline segment, the layers Megatron's
hybrid_layer_allocation.select_pipeline_segment or PipelineParallelLayerLayout gives each
(virtual rank, pipeline rank). Without the copy it prints {"skipped": reason} and exits 0, so
nothing in `make test` needs it.

    python3 bench/megatron/check_args.py ARGS.sh... [--world-size N] [--fork] [--reference DIR]

One JSON line per file. The world size is the file's own (`launch on N GPUs` in its header) unless
--world-size says otherwise; `# environment: NAME=VALUE` lines set the environment first. Exit
status 0 when Megatron accepted every file ("ok": true), 1 when it refused one ("error": its message
and the line of Megatron's code that raised it), 2 on wrong usage.
"""
import argparse
import contextlib
import io
import json
import os
import re
import shlex
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import megatron_reference  # noqa: E402


def world_size_of(path):
    with open(path) as f:
        found = re.search(r"launch on (\d+) GPUs", f.read())
    return int(found.group(1)) if found else None


def read_arguments(path):
    """The flags of an exported arguments file (comment lines dropped, line continuations joined) and
    the environment its `# environment: NAME=VALUE` lines ask for."""
    with open(path) as f:
        text = f.read().splitlines()
    environment = {}
    for line in text:
        if line.startswith("# environment: "):
            name, _, value = line[len("# environment: "):].split(" ")[0].partition("=")
            environment[name] = value
    lines = [line for line in text if not line.lstrip().startswith("#")]
    return shlex.split(" ".join(line.rstrip("\\").rstrip() for line in lines)), environment


class Group:
    """A process group as torch.distributed's stubbed get_rank / get_world_size read it."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size


def segments_of(args):
    """Per (virtual rank, pipeline rank): the layers Megatron builds there."""
    import torch

    pp = args.pipeline_model_parallel_size
    vp = args.virtual_pipeline_model_parallel_size or 1
    out = []
    if getattr(args, "hybrid_layer_pattern", None) is not None:
        from megatron.core.models.hybrid import hybrid_layer_allocation as allocation

        torch.distributed.get_rank = lambda group=None: group.rank if group else 0
        torch.distributed.get_world_size = lambda group=None: group.size if group else 1
        main = allocation.parse_hybrid_pattern(args.hybrid_layer_pattern).main_pattern or ""
        for v in range(vp):
            for p in range(pp):
                layers, offset = allocation.select_pipeline_segment(
                    main, Group(p, pp), v if args.virtual_pipeline_model_parallel_size else None
                )
                out.append({"virtual_rank": v, "pipeline_rank": p, "layers": "".join(layers), "offset": offset})
        return out
    if getattr(args, "pipeline_model_parallel_layout", None) is not None:
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        layout = PipelineParallelLayerLayout.from_str(args.pipeline_model_parallel_layout, pp)
        layout.validate_layer_layout(args.num_layers, args.mtp_num_layers or 0)
        flat = PipelineParallelLayerLayout.parse_str_to_list(args.pipeline_model_parallel_layout)
        for index, stage in enumerate(flat):
            names = "".join({"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}.get(str(getattr(t, "value", t)), "?")
                            for t in stage)
            out.append({"virtual_rank": index // pp, "pipeline_rank": index % pp, "layers": names})
    return out


FACTS = [
    "num_layers", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "data_parallel_size",
    "tensor_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
    "expert_tensor_parallel_size", "hybrid_layer_pattern", "pipeline_model_parallel_layout", "mtp_num_layers",
    "multi_latent_attention", "normalization", "position_embedding_type", "add_bias_linear", "add_qkv_bias",
    "qk_layernorm", "softmax_type", "swiglu", "untie_embeddings_and_output_weights", "group_query_attention",
    "num_query_groups", "kv_channels", "num_experts", "moe_layer_freq", "window_size", "window_attn_skip_freq",
    "use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy", "ckpt_format",
    "recompute_granularity", "sequence_parallel", "micro_batch_size", "global_batch_size", "seq_length",
    "enable_zero_bubble", "zero_bubble_v_schedule", "enable_zb_runtime", "enable_1f1b_v", "num_seq_splits",
    "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "moe_expert_rank_capacity_factor",
    "use_transformer_engine_op_fuser", "moe_paged_stash", "moe_paged_stash_buffer_size_factor_cuda",
]


def fact(args, name):
    value = getattr(args, name, None)
    if isinstance(value, tuple):
        return list(value)
    return value if value is None or isinstance(value, (bool, int, float, str, list)) else str(value)


def check(arguments_module, folder, path, world_size, fork):
    flags, environment = read_arguments(path)
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    os.environ.update(environment)
    world = world_size or world_size_of(path)
    if world is None:
        return {"file": path, "ok": False, "error": "no world size (no 'launch on N GPUs' line; give --world-size)"}
    os.environ["WORLD_SIZE"] = str(world)
    os.environ["RANK"] = "0"
    report = {"file": path, "commit": megatron_reference.commit_of(folder), "flags": flags}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            sys.argv = ["pretrain.py"] + flags
            try:
                args = arguments_module.parse_args()
            except SystemExit as e:  # argparse reports an unknown flag on stderr and exits 2
                raise ValueError(f"Megatron's parser refused the arguments (exit {e.code})") from None
            arguments_module.validate_args(args)
            config_from_args = getattr(arguments_module, "core_transformer_config_from_args", None)
            if config_from_args is not None and not fork:
                config_from_args(args)
            report["segments"] = segments_of(args)
        report.update({name: fact(args, name) for name in FACTS})
        report["ok"] = True
    except (AssertionError, ValueError, TypeError, KeyError, RuntimeError) as e:
        report["ok"] = False
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(folder)]
        where = f" ({os.path.relpath(frames[-1].filename, folder)}:{frames[-1].lineno})" if frames else ""
        report["error"] = f"{type(e).__name__}: {e}{where}"
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arguments", nargs="+")
    parser.add_argument("--world-size", type=int)
    parser.add_argument("--fork", action="store_true", help="the Zero Bubble fork (reference/zero-bubble-megatron)")
    parser.add_argument("--reference")
    o = parser.parse_args()
    folder = megatron_reference.reference_folder(o.reference, "zero-bubble-megatron" if o.fork else "megatron-lm")
    if not os.path.isfile(os.path.join(folder, "megatron", "training", "arguments.py")):
        print(json.dumps({"skipped": f"{folder} holds no megatron/training/arguments.py (see megatron_reference.py)"}))
        return 0
    folder = os.path.abspath(folder)
    with contextlib.redirect_stdout(io.StringIO()):
        arguments_module = megatron_reference.load_arguments(folder)
    ok = True
    for path in o.arguments:
        report = check(arguments_module, folder, path, o.world_size, o.fork)
        ok = ok and report["ok"]
        print(json.dumps(report, sort_keys=True), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
