"""The whole local pipeline, as `make run` runs it on builtin:digits, timed from outside.

    python -m bench.make_run [--goal 90] [--variants default no-tune] [--keep] [--quick]
                             [-- extra `pipelines run` options]

Runs `python -m pipelines run` in a subprocess from the repository root, in this environment (compiled bytecode, as
`make` installs it), its output and model repository in a temporary folder and its server on free ports, stopped
after the run: once with the settings a new user gets (`default`: the study on, deploy on), once with `--no-tune`.
The steps' times are the run summary's; what they leave of the wall time is start-up, orchestration and the report.
`kfp.local` runs the steps one after another, so the wall time is their sum plus that. Also recorded: each run's
test accuracy and whether it was blessed, and how long `import tensorflow` takes in this environment and in a fresh
process without bytecode (an empty bytecode cache and `PYTHONDONTWRITEBYTECODE=1`, as in an environment installed
without `--compile-bytecode`): every TensorFlow step of a run pays that start-up.

Figure of merit: the default run's wall time. Goal: at most `--goal` seconds. Compare runs on one machine only.
`--quick`: the `no-tune` run alone, one epoch, no deploy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT
from bench.results import Recorder, result_path

VARIANTS = {"default": [], "no-tune": ["--no-tune"]}


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def tensorflow_bytecode() -> dict:
    """Whether TensorFlow's bytecode is compiled in this environment, and `import tensorflow` seconds with the
    environment as it is and without bytecode."""
    import importlib.util

    spec = importlib.util.find_spec("tensorflow")
    assert spec is not None and spec.origin is not None, "TensorFlow is not installed"
    package = Path(spec.origin).parent
    compiled = (package / "__pycache__").is_dir() and any((package / "__pycache__").glob("__init__.*.pyc"))

    def import_seconds(env: dict) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import tensorflow"], env=env, check=True, capture_output=True)
        return round(time.perf_counter() - started, 2)

    base = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="bench-no-bytecode-") as empty:
        without = import_seconds({**base, "PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"})
    return {
        "compiled": compiled,
        "import_seconds": import_seconds(base),
        "import_seconds_without_bytecode": without,
        "loadavg": _loadavg(),
    }


def run_variant(name: str, extra: list[str], goal: float, keep: bool) -> dict:
    tmp = tempfile.mkdtemp(prefix=f"bench-make-run-{name}-")
    # the deploy step's local server: recorded here, started on free ports, stopped after the run
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONUNBUFFERED="1", TFPIPE_SERVING_STATE=f"{tmp}/serving")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = Path(tmp) / "run"
    command = [
        sys.executable,
        "-m",
        "pipelines",
        "run",
        "--out",
        str(out),
        "--model-repository",
        str(Path(tmp) / "repo"),
        "--rest-port",
        "0",
        "--grpc-port",
        "0",
        *VARIANTS.get(name, []),
        *extra,
    ]
    print(f"$ {' '.join(command)}", flush=True)
    load_before = _loadavg()
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, check=False)
    wall = time.perf_counter() - started
    load_after = _loadavg()
    os.environ["TFPIPE_SERVING_STATE"] = env["TFPIPE_SERVING_STATE"]
    from serving.lifecycle import stop_server

    stop_server(str(Path(tmp) / "repo"), "tfpipe-model")

    summary_file = out / "run_summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    steps = [{"name": s["name"], "status": s["status"], "seconds": s["seconds"]} for s in summary.get("steps", [])]
    tuning = summary.get("tuning") or {}
    accounted = sum(s["seconds"] or 0 for s in steps)
    result = {
        "variant": name,
        "command": command,
        "returncode": proc.returncode,
        "wall_seconds": round(wall, 2),
        "pipeline_seconds": summary.get("seconds"),
        "status": summary.get("status"),
        "steps": steps,
        "steps_seconds": round(accounted, 2),
        "outside_steps_seconds": round(wall - accounted, 2),  # start-up, orchestration and the report
        "test_accuracy": (summary.get("metrics") or {}).get("test_accuracy"),
        "blessed": (summary.get("gate") or {}).get("blessed"),
        "tuning_trials": len(tuning.get("trials") or []),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "goal_seconds": goal,
        "goal_met": proc.returncode == 0 and wall <= goal,
    }
    print(
        f"\nmake run ({name}): wall {wall:.1f}s (pipeline's own total {summary.get('seconds', float('nan')):.1f}s, "
        f"status {summary.get('status')}, exit code {proc.returncode}); load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after"
    )
    for s in steps:
        print(f"  {s['name']:<26} {s['status']:<10} {s['seconds']:>7.1f}s")
    if steps:
        print(
            f"  {'(sum of steps)':<26} {'':<10} {accounted:>7.1f}s; start-up, orchestration and report: "
            f"{wall - accounted:.1f}s"
        )
    if keep:
        print(f"run directory kept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.make_run", description=__doc__.splitlines()[0])
    p.add_argument("--goal", type=float, default=90.0, help="wall-time goal in seconds, default variant (90)")
    p.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=list(VARIANTS),
        help="runs to time, one after the other (default: default no-tune)",
    )
    p.add_argument("--output", type=Path, help="JSON results [bench/results/make_run.json]")
    p.add_argument("--keep", action="store_true", help="keep the run directories (default: removed)")
    p.add_argument("--quick", action="store_true", help="no-tune alone, 1 epoch, no deploy: checks that it works")
    p.add_argument("extra", nargs="*", help="further `python -m pipelines run` options for every run (after --)")
    args = p.parse_args(argv)
    if args.quick:
        args.variants, args.extra = ["no-tune"], [*args.extra, "--epochs", "1", "--no-deploy"]
    recorder = Recorder("make_run", args, quick=args.quick)

    bytecode = tensorflow_bytecode()
    print(
        f"TensorFlow bytecode compiled: {bytecode['compiled']}; import tensorflow {bytecode['import_seconds']}s "
        f"(without bytecode: {bytecode['import_seconds_without_bytecode']}s)",
        flush=True,
    )
    runs = [run_variant(name, args.extra, args.goal, args.keep) for name in args.variants]
    default = next((r for r in runs if r["variant"] == "default"), None)
    met = bool(default and default["goal_met"])
    result = {
        "goal_seconds": args.goal,
        "goal_met": met,
        "runs": runs,
        "tensorflow_bytecode": bytecode,
        "executable": sys.executable,
    }
    print()
    for r in runs:
        print(
            f"{r['variant']:<8} wall {r['wall_seconds']:>6.1f}s  exit {r['returncode']}  load average "
            f"{r['loadavg_before'][0]:.2f}/{r['loadavg_after'][0]:.2f}"
        )
    if default:
        print(
            f"goal: default run wall <= {args.goal:g}s ... {'MET' if met else 'NOT MET'} "
            f"({default['wall_seconds']:.1f}s{'' if default['returncode'] == 0 else ', run failed'})"
        )
    recorder.save(result, result_path("make_run", args.quick, args.output))
    return 0 if all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
