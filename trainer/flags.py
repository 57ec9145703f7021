"""The trainer's command line: its parser (`python -m trainer.task`) and the one builder of it that every launcher
uses (local workers and trials, the TFJob, Katib's trials, Vertex AI's worker pools), so that a flag is spelled in
one place."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from trainer import builder

TRAINER_MODULE = "trainer.task"
PRECISIONS = ("none", "mixed_float16", "mixed_bfloat16")  # --mixed-precision: none is Keras's float32 policy
# The trainer image's ENTRYPOINT (containers/trainer.Dockerfile), for the pods and jobs that must name their command.
TRAINER_COMMAND = ("python", "-m", TRAINER_MODULE)
# The metrics the trainer logs each epoch (Keras's names: the model is compiled with accuracy) and the goal each can
# only sensibly have; `--hypertune-metric-tag` names the one a study's trials report.
METRIC_GOALS = {"val_accuracy": "maximize", "val_loss": "minimize", "accuracy": "maximize", "loss": "minimize"}
# Set by Vertex AI on a tuning job's trials (the study's metric_id); the self-hosted study and Katib set it too.
METRIC_TAG_ENV = "CLOUD_ML_HP_METRIC_TAG"


def flag(name: str) -> str:
    """`learning_rate` → `--learning-rate`."""
    return "--" + name.replace("_", "-")


def flag_value(value: object) -> str:
    """A flag's text; integral floats as integers: KFP passes dict parameters through JSON/protobuf numbers, which turn
    every int into a float, and the trainer's integer flags reject "32.0"."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def command_line(
    hyperparameters: Mapping[str, object] | None = None,
    *,
    data_dir: str = "",
    job_dir: str = "",
    model: str = "",
) -> list[str]:
    """The trainer's arguments: `--data-dir`, `--job-dir` and `--model` where given, then every hyperparameter as
    `--name value` (`{"learning_rate": 0.01, "batch_size": 32.0}` → `--learning-rate 0.01 --batch-size 32`)."""
    args = [
        item
        for name, value in (("data_dir", data_dir), ("job_dir", job_dir), ("model", model))
        if value
        for item in (flag(name), value)
    ]
    return args + [item for k, v in (hyperparameters or {}).items() for item in (flag(k), flag_value(v))]


def global_batch(args: argparse.Namespace, replicas: int, workers: int) -> int:
    """The examples of one training step across the cluster: `--batch-size` per replica, for `--batch-workers`
    workers of this cluster's `replicas / workers` replicas each (by default: this cluster's workers)."""
    return args.batch_size * replicas // workers * (args.batch_workers or workers)


def _underscored_flags(argv: list[str]) -> list[str]:
    """Vertex AI tuning jobs pass trial values as `--learning_rate=0.01`; accept them as `--learning-rate`."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            arg = name.replace("_", "-") + sep + value
        out.append(arg)
    return out


def _integer(text: str) -> int:
    """An integer flag's value: `64`, or `64.0`, as Vertex AI's tuning service passes integer parameters."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (not a whole number)")
    return int(value)


def parse_args(argv=None, environ=os.environ) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m trainer.task",
        description="Trainer entry point: `python -m trainer.task --data-dir DIR [--job-dir DIR] [--model MODULE:FUNCTION]",
    )
    p.add_argument("--data-dir", required=True, help="prepared dataset directory (local or gs://)")
    p.add_argument("--job-dir", default="", help="base output directory (default: parent of AIP_MODEL_DIR)")
    p.add_argument("--model-dir", default=environ.get("AIP_MODEL_DIR", ""))
    p.add_argument("--checkpoint-dir", default=environ.get("AIP_CHECKPOINT_DIR", ""))
    p.add_argument("--log-dir", default=environ.get("AIP_TENSORBOARD_LOG_DIR", ""))
    p.add_argument("--model", default=builder.DEFAULT_BUILDER, help="the model builder, package.module:function")
    p.add_argument("--epochs", type=_integer, default=10)
    p.add_argument("--batch-size", type=_integer, default=32, help="per-replica batch size")
    p.add_argument(
        "--batch-workers",
        type=_integer,
        default=0,
        help="train at the global batch of this many workers (0: this cluster's), as a study's trials do for the "
        "final training's workers: --batch-size x N x this worker's replicas",
    )
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--hidden-units", type=_integer, default=128)
    p.add_argument("--filters", type=_integer, default=16, help="filters of the first conv block (doubles per block)")
    p.add_argument("--image-size", type=_integer, default=0, help="model input size; 0 = the prepared image size")
    p.add_argument("--steps-per-epoch", type=_integer, default=0, help="0 = one pass over the training split")
    p.add_argument(
        "--steps-per-execution",
        type=_integer,
        default=32,
        help="training steps per call of the compiled step (at most an epoch's): fewer Python round trips per step",
    )
    p.add_argument("--seed", type=_integer, default=42)
    p.add_argument("--cache-max-mb", type=_integer, default=512, help="cache the training split in memory below this")
    p.add_argument(
        "--mixed-precision",
        choices=PRECISIONS,
        default="none",
        help="Keras mixed-precision policy (the model's output layer must stay float32)",
    )
    p.add_argument(
        "--hypertune-metric-tag",
        default=environ.get(METRIC_TAG_ENV) or "val_accuracy",
        help=f"the metric reported to hypertune each epoch, under its own name: one of {', '.join(METRIC_GOALS)} "
        f"(default: ${METRIC_TAG_ENV}, else val_accuracy)",
    )
    args = p.parse_args(_underscored_flags(argv if argv is not None else sys.argv[1:]))
    for name in ("epochs", "batch_size", "hidden_units", "filters", "steps_per_execution"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.batch_workers < 0:
        p.error("--batch-workers must be >= 0")
    if not 0 <= args.dropout < 1:
        p.error("--dropout must be in [0, 1)")
    if args.learning_rate <= 0:
        p.error("--learning-rate must be > 0")
    if args.hypertune_metric_tag not in METRIC_GOALS:
        p.error(
            f"--hypertune-metric-tag: the trainer logs no metric {args.hypertune_metric_tag!r}; it logs "
            f"{', '.join(METRIC_GOALS)}"
        )
    try:
        builder.parse(args.model)
    except builder.BuilderError as e:
        p.error(f"--model: {e}")
    if not args.job_dir:
        if not args.model_dir:
            p.error("give --job-dir or --model-dir (or set AIP_MODEL_DIR)")
        args.job_dir = os.path.dirname(args.model_dir.rstrip("/"))
    args.job_dir = args.job_dir.rstrip("/")
    args.model_dir = (args.model_dir or f"{args.job_dir}/model").rstrip("/")
    args.checkpoint_dir = (args.checkpoint_dir or f"{args.job_dir}/checkpoints").rstrip("/")
    args.log_dir = (args.log_dir or f"{args.job_dir}/logs").rstrip("/")
    return args
