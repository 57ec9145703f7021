"""A rehearsal's wall time (the compiled Vertex template against the local Vertex AI double) against `run`'s.

    python -m bench.rehearse [--goal 1.5] [--quick]

Two pairs, each `python -m pipelines run` then `python -m pipelines rehearse` (the compiled Vertex template against
the local Vertex AI double), in subprocesses from the repository root, each with fresh state so that neither finds a
champion and the rehearsal's cache serves nothing; builtin:digits, deploy on, both sides alike. The default pair
runs both with the default settings (the study on, as `make run`): the pair the goal is about. The no-tune pair
runs both without the study (`run --no-tune`, `rehearse --param tune=false`), so that both train with the same
default hyperparameters: each side's study picks its own, which set the training's length. Reported per side: the
wall time, the steps' times and the hyperparameters it trained with.

Figure of merit: rehearse / run wall time. Goal: at most `--goal` with the default settings. The rehearsal does more
work by design: every artifact and job output goes to a GCS emulator through a local HTTPS proxy, the Vertex steps
are GCPC's launchers polling the API double, each look-up step is a fresh process importing the aiplatform SDK, and
each deploy starts a serving container on a copy of the model, where `run` works on local disk.
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


def _timed(command: list[str], env: dict, summary: Path) -> dict:
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    wall = time.perf_counter() - started
    data = json.loads(summary.read_text()) if summary.exists() else {}
    return {
        "command": command,
        "returncode": code,
        "wall_seconds": round(wall, 2),
        "status": data.get("status"),
        "hyperparameters": (data.get("training") or {}).get("hyperparameters"),
        "steps": [
            {"name": s["name"], "status": s["status"], "seconds": s["seconds"]}
            for s in data.get("steps", [])
            if s["status"] != "SKIPPED"
        ],
    }


def _pair(run_extra: list[str], rehearse_extra: list[str]) -> tuple[dict, dict]:
    """`run` then `rehearse` with the same settings, each with fresh state; their timings, statuses and the
    hyperparameters each trained with (a study picks its own: the training's length depends on them)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-rehearse-"))
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONUNBUFFERED="1", TFPIPE_SERVING_STATE=f"{tmp}/serving")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    common = ["--rest-port", "0", "--grpc-port", "0"]
    try:
        run = _timed(
            [
                sys.executable,
                "-m",
                "pipelines",
                "run",
                "--out",
                str(tmp / "run"),
                "--model-repository",
                str(tmp / "repo"),
                *common,
                *run_extra,
            ],
            env,
            tmp / "run" / "run_summary.json",
        )
        os.environ["TFPIPE_SERVING_STATE"] = env["TFPIPE_SERVING_STATE"]
        from serving.lifecycle import stop_server

        stop_server(str(tmp / "repo"))
        rehearsal = _timed(
            [
                sys.executable,
                "-m",
                "pipelines",
                "rehearse",
                "--out",
                str(tmp / "rehearsal"),
                "--state",
                str(tmp / "state"),
                *rehearse_extra,
            ],
            env,
            tmp / "rehearsal" / "run_summary.json",
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return run, rehearsal


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rehearse", description=__doc__.splitlines()[0])
    p.add_argument("--goal", type=float, default=1.5, help="goal for rehearse / run wall time (default 1.5)")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/rehearse.json]")
    p.add_argument("--quick", action="store_true", help="1 epoch, no study, no deploy: checks that it works")
    args = p.parse_args(argv)
    recorder = Recorder("rehearse", args, quick=args.quick)
    run_quick = ["--epochs", "1", "--no-tune", "--no-deploy"] if args.quick else []
    rehearse_quick = ["--param", "epochs=1", "--param", "tune=false", "--param", "deploy=false"] if args.quick else []

    pairs = (
        {"default": ([], [])}
        if args.quick
        else {"default": ([], []), "no_tune": (["--no-tune"], ["--param", "tune=false"])}
    )
    result: dict = {"goal_ratio": args.goal}
    for label, (run_extra, rehearse_extra) in pairs.items():
        run, rehearsal = _pair(run_quick + run_extra, rehearse_quick + rehearse_extra)
        ratio = rehearsal["wall_seconds"] / run["wall_seconds"]
        succeeded = run["returncode"] == rehearsal["returncode"] == 0
        result[label] = {"run": run, "rehearse": rehearsal, "ratio_rehearse_to_run": round(ratio, 3)}
        print(
            f"\n{label}: run {run['wall_seconds']:.1f}s ({run['status']}), rehearse {rehearsal['wall_seconds']:.1f}s "
            f"({rehearsal['status']}): ratio {ratio:.2f}"
        )
        if not succeeded:
            recorder.save(result, result_path("rehearse", args.quick, args.output))
            return 1
    result["ratio_rehearse_to_run"] = result["default"]["ratio_rehearse_to_run"]
    result["goal_met"] = result["ratio_rehearse_to_run"] <= args.goal
    print(f"goal (default settings) <= {args.goal:g}: {'MET' if result['goal_met'] else 'NOT MET'}")
    recorder.save(result, result_path("rehearse", args.quick, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
