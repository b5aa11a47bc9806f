#!/usr/bin/env python3
"""Runs configurations `pipestudio-cli export --format torchtitan` wrote through torchtitan main's
own Trainer.Config, torch stubbed out, and prints one JSON line per file.

torchtitan comes from a local copy of its `torchtitan/` package (not part of PipeStudio; git
ignores reference/): `git -C TORCHTITAN archive COMMIT torchtitan | tar -x -C
reference/torchtitan-main`, with the commit in reference/torchtitan-main/COMMIT, or
$PIPESTUDIO_TORCHTITAN_MAIN. Its modules are loaded for real and everything they import beyond
them is stubbed (bench/megatron/megatron_reference.py's loader). For each file the script
  - checks that the configuration function the file starts from (BASE, `module:function`) is one
    torchtitan defines (the function in that module's source);
  - calls the file's pipestudio_plan() on torchtitan's own `Trainer.Config()` (the shipped
    configurations build their model specs, which need torch), so every field the file sets must be
    a field of torchtitan's config classes;
  - runs Trainer.Config.__post_init__ (which refuses CUDA graphs under pipeline parallelism,
    _validate_cuda_graphs) and the parallelism and training configs' own checks.
Without the copy it prints {"skipped": …} and exits 0.

    python3 bench/torchtitan/check_main.py FILE.py... [--reference DIR]
"""
import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import json
import os
import re
import sys
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "megatron"))

import megatron_reference  # noqa: E402


def defines(folder, base):
    """Whether torchtitan's source at `folder` defines the function `module:function`."""
    module, _, function = base.partition(":")
    path = os.path.join(folder, *module.split(".")) + ".py"
    if not os.path.isfile(path):
        return False
    with open(path) as f:
        tree = ast.parse(f.read())
    return any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body)


def check(folder, trainer, path):
    with open(path) as f:
        text = f.read()
    found = re.search(r'PIPESTUDIO_TORCHTITAN_BASE", "([^"]*)"', text)
    base = found.group(1) if found else ""
    report = {"file": path, "commit": megatron_reference.commit_of(folder), "base": base,
              "base_defined": bool(base) and defines(folder, base)}
    holder = types.ModuleType("pipestudio_check_main_base")
    holder.defaults = lambda: trainer.Trainer.Config()
    sys.modules[holder.__name__] = holder
    os.environ["PIPESTUDIO_TORCHTITAN_BASE"] = "pipestudio_check_main_base:defaults"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            config = module.pipestudio_plan()
            config.__post_init__()
            config.parallelism.__post_init__()
            if hasattr(config.training, "__post_init__"):
                config.training.__post_init__()
        p = config.parallelism
        report.update({
            "ok": True,
            "pipeline_parallel_degree": p.pipeline_parallel_degree,
            "pipeline_parallel_schedule": p.pipeline_parallel_schedule,
            "disable_cuda_graphs": config.training.disable_cuda_graphs,
            "stages": len(p.module_fqns_per_model_part or []),
        })
    except (AssertionError, ValueError, TypeError, AttributeError, KeyError) as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(folder)]
        where = f" ({os.path.relpath(frames[-1].filename, folder)}:{frames[-1].lineno})" if frames else ""
        report.update({"ok": False, "error": f"{type(e).__name__}: {e}{where}"})
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--reference", default=os.environ.get("PIPESTUDIO_TORCHTITAN_MAIN",
                                                              os.path.join(ROOT, "reference", "torchtitan-main")))
    o = parser.parse_args()
    folder = os.path.abspath(o.reference)
    if not os.path.isfile(os.path.join(folder, "torchtitan", "trainer.py")):
        print(json.dumps({"skipped": f"{folder} holds no torchtitan/trainer.py (see this script's docstring)"}))
        return 0
    with contextlib.redirect_stdout(io.StringIO()):
        megatron_reference.install(folder, "torchtitan")
        trainer = importlib.import_module("torchtitan.trainer")
    ok = True
    for path in o.files:
        report = check(folder, trainer, os.path.abspath(path))
        ok = ok and report["ok"]
        print(json.dumps(report, sort_keys=True), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
