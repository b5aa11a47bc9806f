#!/usr/bin/env python3
"""Runs configurations that `pipestudio-cli export --format torchtitan` wrote against torchtitan's
own config classes.

torchtitan main selects a run with --module/--config: a Python function returning Trainer.Config.
This loads torchtitan's torchtitan/config/configs.py from a local copy (not part of PipeStudio;
copy it into reference/torchtitan/ at the repository root, which git ignores, or point
--reference or $PIPESTUDIO_TORCHTITAN_REFERENCE at a folder holding it), stubs torch and the
trainer around its real ParallelismConfig and TrainingConfig (slots dataclasses: a misspelt field
raises), calls each file's pipestudio_plan() on a base configuration of defaults, re-runs the
classes' own checks (__post_init__) and the mesh rules of parallel_dims.py (the degrees multiply
to the world size, expert_parallel_degree divides dp_shard·cp·tp), and prints one line per file.
Without the reference file it says so and exits 0, so `make test` never needs it.

    python3 bench/torchtitan/check_config.py PLAN.py... [--reference DIR]
"""
import argparse
import dataclasses
import importlib.util
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_configs(folder):
    sys.modules["torch"] = types.ModuleType("torch")  # configs.py only touches it for symmetric memory
    spec = importlib.util.spec_from_file_location("torchtitan_configs", os.path.join(folder, "configs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stub_torchtitan(configs):
    """torchtitan.trainer.Trainer.Config over the real parallelism and training configs, and the
    activation-checkpointing policies the export names."""
    for name in ["torchtitan", "torchtitan.distributed"]:
        sys.modules[name] = types.ModuleType(name)

    @dataclasses.dataclass(kw_only=True, slots=True)
    class PolicyConfig:
        preserve_rng_state: bool = True

    checkpointing = types.ModuleType("torchtitan.distributed.activation_checkpoint")
    for policy in ["FullAC", "SelectiveAC"]:
        config = type("Config", (PolicyConfig,), {"__slots__": (), "__qualname__": policy + ".Config"})
        setattr(checkpointing, policy, type(policy, (), {"Config": config}))
    sys.modules[checkpointing.__name__] = checkpointing

    @dataclasses.dataclass(kw_only=True, slots=True)
    class TrainerConfig:
        training: object = dataclasses.field(default_factory=configs.TrainingConfig)
        parallelism: object = dataclasses.field(default_factory=configs.ParallelismConfig)
        activation_checkpoint: object = None

    trainer = types.ModuleType("torchtitan.trainer")
    trainer.Trainer = type("Trainer", (), {"Config": TrainerConfig})
    sys.modules[trainer.__name__] = trainer
    base = types.ModuleType("pipestudio_check_base")
    base.defaults = lambda: TrainerConfig(activation_checkpoint=checkpointing.SelectiveAC.Config())
    sys.modules[base.__name__] = base
    os.environ["PIPESTUDIO_TORCHTITAN_BASE"] = "pipestudio_check_base:defaults"


def check(path):
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.pipestudio_plan()
    p, t = config.parallelism, config.training
    p.__post_init__()
    t.__post_init__()
    if not os.path.isfile(p.pipeline_parallel_schedule_csv):
        raise ValueError(f"pipeline_parallel_schedule_csv {p.pipeline_parallel_schedule_csv} is not a file")
    if (p.data_parallel_shard_degree * p.context_parallel_degree * p.tensor_parallel_degree) % p.expert_parallel_degree:
        raise ValueError("expert_parallel_degree does not divide dp_shard * cp * tp")
    if len(p.module_fqns_per_model_part) % p.pipeline_parallel_degree:
        raise ValueError("the stages do not divide over the pipeline ranks")
    gpus = (p.data_parallel_replicate_degree * p.data_parallel_shard_degree * p.context_parallel_degree *
            p.tensor_parallel_degree * p.pipeline_parallel_degree)
    checkpointing = type(config.activation_checkpoint).__qualname__ if config.activation_checkpoint else "none"
    return (f"{gpus} GPUs, pp {p.pipeline_parallel_degree} x {len(p.module_fqns_per_model_part)} stages, "
            f"{p.num_pp_microbatches} microbatches of {t.num_tokens_per_microbatch_per_dp_rank} tokens, "
            f"{t.num_tokens_per_train_step} tokens per step, dp {p.data_parallel_replicate_degree}x"
            f"{p.data_parallel_shard_degree} ({p.fsdp_reshard_after_forward}), ep {p.expert_parallel_degree}, "
            f"checkpointing {checkpointing}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--reference", default=os.environ.get("PIPESTUDIO_TORCHTITAN_REFERENCE",
                                                              os.path.join(ROOT, "reference", "torchtitan")))
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.reference, "configs.py")):
        print(f"check_config: no configs.py in {args.reference} (torchtitan/config/configs.py of a local "
              "torchtitan copy); nothing checked")
        return 0
    stub_torchtitan(load_configs(args.reference))
    failed = 0
    for path in args.files:
        try:
            print(f"{path}: ok: {check(path)}")
        except Exception as e:  # noqa: BLE001 (every problem is reported per file)
            failed += 1
            print(f"{path}: FAILED: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
