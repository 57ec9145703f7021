"""End-to-end benchmark of `make run`: the whole local pipeline, timed from outside.

    python -m bench.make_run [--goal 90] [-- extra `pipelines run` options]

Runs `python -m pipelines run --out <tmp> --model-repository <tmp>/repo` in a subprocess (this interpreter, same
environment, cwd = the repository root), so the user's runs/ and model repository are left alone. Prints the wall
time, the per-step breakdown from `<tmp>/run_summary.json` and whether the goal (default ≤ 90 s) is met; writes
bench/results/make_run.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import save

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "make_run.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.make_run", description=__doc__.splitlines()[0])
    p.add_argument("--goal", type=float, default=90.0, help="wall-time goal in seconds (default 90)")
    p.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results [{RESULTS}]")
    p.add_argument("--keep", action="store_true", help="keep the run directory (default: removed)")
    p.add_argument("extra", nargs="*", help="further `python -m pipelines run` options (after --)")
    args = p.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="bench-make-run-")
    # the deploy step's local server: recorded here, started on free ports, stopped after the run
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONUNBUFFERED="1", TFPIPE_SERVING_STATE=f"{tmp}/serving")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = Path(tmp) / "run"
    command = [sys.executable, "-m", "pipelines", "run", "--out", str(out),
               "--model-repository", str(Path(tmp) / "repo"), "--rest-port", "0", "--grpc-port", "0", *args.extra]
    print("$", " ".join(command), flush=True)
    load_before = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, check=False)
    wall = time.perf_counter() - started
    os.environ["TFPIPE_SERVING_STATE"] = env["TFPIPE_SERVING_STATE"]
    from components.deploy_model import stop_server

    stop_server(str(Path(tmp) / "repo"), "tfpipe-model")
    load_after = os.getloadavg()

    summary_file = out / "run_summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    steps = [{"name": s["name"], "status": s["status"], "seconds": s["seconds"]} for s in summary.get("steps", [])]
    met = proc.returncode == 0 and wall <= args.goal
    result = {
        "benchmark": "make_run",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "returncode": proc.returncode,
        "wall_seconds": round(wall, 2),
        "pipeline_seconds": summary.get("seconds"),
        "status": summary.get("status"),
        "steps": steps,
        "goal_seconds": args.goal,
        "goal_met": met,
        "environment": {"python": platform.python_version(), "machine": platform.machine(),
                        "cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before],
                        "loadavg_after": [round(x, 2) for x in load_after]},
    }

    print(f"\nmake run: wall {wall:.1f}s (pipeline's own total {summary.get('seconds', float('nan')):.1f}s, "
          f"status {summary.get('status')}, exit code {proc.returncode})")
    for s in steps:
        print(f"  {s['name']:<22} {s['status']:<10} {s['seconds']:>7.1f}s")
    if steps:
        accounted = sum(s["seconds"] or 0 for s in steps)
        print(f"  {'(sum of steps)':<22} {'':<10} {accounted:>7.1f}s; start-up, orchestration and report: "
              f"{wall - accounted:.1f}s")
    print(f"goal: wall <= {args.goal:g}s ... {'MET' if met else 'NOT MET'} ({wall:.1f}s"
          f"{'' if proc.returncode == 0 else ', run failed'})")
    print(f"load average before/after: {load_before[0]:.2f}/{load_after[0]:.2f} on {os.cpu_count()} CPUs")
    save(result, args.output)
    if args.keep:
        print(f"run directory kept: {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
