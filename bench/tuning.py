"""Trials the project's study needs to come within a point of the best-known validation accuracy, vs random search.

    python -m bench.tuning [--seeds 3] [--trials 12] [--parallel 2] [--epochs 3] [--workdir DIR] [--quick]

On builtin:digits, over DEFAULT_STUDY's search space (learning rate, hidden units, dropout), the project's study
(OSS Vizier's GP bandit, `algorithm: default`) and random search each run `--trials` trials, `--parallel` at a time,
once per seed; every trial is a real `python -m trainer.task` run (one worker, `--epochs` epochs). The best-known
accuracy is the best trial of the whole run, either method; the target is one point below it. For each run: the
trials needed to reach the target (`--trials` + 1 if it never does).

Figure of merit: the study's median over seeds / random search's. Goal: ≤ 0.7. The validation split is small (the
result says what one example is worth in points), so these counts are noisy: treat the ratio as indicative.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.results import Recorder, result_path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.tuning", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workdir", type=Path)
    p.add_argument("--quick", action="store_true", help="1 seed, 2 trials, 1 epoch: checks that it works")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/tuning.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.trials, args.epochs = 1, 2, 1
    recorder = Recorder("tuning", args, quick=args.quick)

    from components.lib.study.spec import DEFAULT_STUDY
    from components.prepare_data import prepare
    from components.tune_hyperparameters import run_study

    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as tmp:
        work = args.workdir or Path(tmp)
        validation_examples = prepare("builtin:digits", str(work / "data"), num_workers=1)["splits"]["val"]["examples"]
        runs = {}
        started = time.time()
        for algorithm in ("default", "random"):
            for seed in range(args.seeds):
                spec = DEFAULT_STUDY.model_copy(
                    update={
                        "algorithm": algorithm,
                        "max_trial_count": args.trials,
                        "parallel_trial_count": args.parallel,
                    }
                )
                result = run_study(
                    spec,
                    str(work / f"{algorithm}-{seed}"),
                    ["--data-dir", str(work / "data"), "--epochs", str(args.epochs), "--seed", str(seed)],
                    seed=seed,
                    log=lambda m: None,
                )
                runs[f"{algorithm}-{seed}"] = [t["metric"] for t in result["trials"]]
                print(
                    f"{algorithm} seed {seed}: "
                    + " ".join(f"{m:.3f}" if m is not None else "fail" for m in runs[f"{algorithm}-{seed}"]),
                    flush=True,
                )
    best_known = max(m for metrics in runs.values() for m in metrics if m is not None)
    target = best_known - 0.01

    def needed(metrics):
        return next((i for i, m in enumerate(metrics, 1) if m is not None and m >= target), args.trials + 1)

    counts = {name: needed(metrics) for name, metrics in runs.items()}
    medians = {a: statistics.median(counts[f"{a}-{s}"] for s in range(args.seeds)) for a in ("default", "random")}
    ratio = medians["default"] / medians["random"]
    result = {
        "seeds": args.seeds,
        "trials": args.trials,
        "parallel": args.parallel,
        "epochs": args.epochs,
        "best_known": best_known,
        "target": target,
        "trials_needed": counts,
        "median_trials_needed": medians,
        "ratio": ratio,
        "goal": {"max_ratio": 0.7, "met": ratio <= 0.7},
        "runs": runs,
        "seconds": round(time.time() - started, 1),
        "trials_run": sum(len(metrics) for metrics in runs.values()),
        "validation_examples": validation_examples,
        "one_validation_example_points": round(100 / validation_examples, 2),
    }
    print(f"\nbest-known val accuracy {best_known:.4f}; target {target:.4f}")
    print(f"trials needed: {counts}")
    print(
        f"median: Vizier {medians['default']}, random {medians['random']}; ratio {ratio:.2f} "
        f"(goal <= 0.7: {'MET' if ratio <= 0.7 else 'NOT MET'})"
    )
    recorder.save(result, result_path("tuning", args.quick, args.output))


if __name__ == "__main__":
    main()
