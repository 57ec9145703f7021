"""The trainer's command line: its parser (`python -m trainer.task`) and the one builder of it that every launcher
uses (local workers and trials, the TFJob, Katib's trials, Vertex AI's worker pools), so that a flag is spelled in
one place."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping

from trainer import builder, hyperparameters as declarations

TRAINER_MODULE = "trainer.task"
PRECISIONS = ("none", "mixed_float16", "mixed_bfloat16")  # --mixed-precision: none is Keras's float32 policy
# The trainer image's ENTRYPOINT (containers/trainer.Dockerfile), for the pods and jobs that must name their command.
TRAINER_COMMAND = ("python", "-m", TRAINER_MODULE)
# The metrics the trainer logs each epoch (Keras's names: the model is compiled with accuracy) and the goal each can
# only sensibly have; `--hypertune-metric-tag` names the one a study's trials report.
METRIC_GOALS = {"val_accuracy": "maximize", "val_loss": "minimize", "accuracy": "maximize", "loss": "minimize"}
DEFAULT_METRIC = "val_accuracy"
# Set by Vertex AI on a tuning job's trials (the study's metric_id); the self-hosted study and Katib set it too.
METRIC_TAG_ENV = "CLOUD_ML_HP_METRIC_TAG"


def flag(name: str) -> str:
    """`learning_rate` → `--learning-rate`."""
    return "--" + name.replace("_", "-")


def flag_value(value: object) -> str:
    """A flag's text; integral floats as integers: KFP passes dict parameters through JSON/protobuf numbers, which turn
    every int into a float, and the trainer's integer flags reject "32.0"."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


@dataclasses.dataclass(frozen=True)
class TrainerSetup:
    """What every trial and the final training train: the model builder, the mixed-precision policy and fixed
    hyperparameter values (the config's `trainer:`), and the metric (the study's `metric_id`) by which a training
    keeps its best checkpoint and a trial reports. KFP steps take it as a dict (`as_dict`, `from_dict`)."""

    model: str = builder.DEFAULT_BUILDER
    mixed_precision: str = "none"
    hyperparameters: Mapping[str, object] = dataclasses.field(default_factory=dict)
    metric: str = DEFAULT_METRIC

    @classmethod
    def from_dict(cls, value: Mapping[str, object]) -> TrainerSetup:
        return cls(**value)  # type: ignore[arg-type]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def flags(self, leave_out: tuple[str, ...] | list[str] = ()) -> dict[str, object]:
        """Its trainer flags by name: `model`, `mixed_precision` unless none, `hypertune_metric_tag` unless the
        default, the fixed values but those in `leave_out` (a tuning job's own parameters)."""
        precision = {"mixed_precision": self.mixed_precision} if self.mixed_precision != "none" else {}
        metric = {"hypertune_metric_tag": self.metric} if self.metric != DEFAULT_METRIC else {}
        fixed = {k: v for k, v in self.hyperparameters.items() if k not in leave_out}
        return {"model": self.model, **precision, **metric, **fixed}


def command_line(
    hyperparameters: Mapping[str, object] | None = None,
    *,
    data_dir: str = "",
    job_dir: str = "",
    trainer: TrainerSetup | None = None,
) -> list[str]:
    """The trainer's arguments: `--data-dir` and `--job-dir` where given, then the `trainer` setup's flags, then
    every hyperparameter as `--name value` (`{"learning_rate": 0.01, "batch_size": 32.0}` → `--learning-rate 0.01
    --batch-size 32`), which overrides the setup's value of the same name."""
    args = [
        item for name, value in (("data_dir", data_dir), ("job_dir", job_dir)) if value for item in (flag(name), value)
    ]
    flags = {**(trainer.flags() if trainer else {}), **(hyperparameters or {})}
    return args + [item for k, v in flags.items() for item in (flag(k), flag_value(v))]


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


def _typed(hyperparameter: declarations.Hyperparameter):
    """argparse's `type` of a declared hyperparameter."""

    def typed(text: str):
        try:
            return hyperparameter.parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    typed.__name__ = hyperparameter.type.__name__
    return typed


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    """The trainer's own flags; the hyperparameters are added by their declaration (`declared`)."""
    p = argparse.ArgumentParser(
        prog="python -m trainer.task",
        description="Trainer entry point: `python -m trainer.task --data-dir DIR [--job-dir DIR] [--model MODULE:FUNCTION] "
        "[--HYPERPARAMETER VALUE ...]`: the trainer's own hyperparameters and those of the model's builder",
    )
    p.add_argument("--data-dir", required=True, help="prepared dataset directory (local or gs://)")
    p.add_argument("--job-dir", default="", help="base output directory (default: parent of AIP_MODEL_DIR)")
    p.add_argument("--model-dir", default=environ.get("AIP_MODEL_DIR", ""))
    p.add_argument("--checkpoint-dir", default=environ.get("AIP_CHECKPOINT_DIR", ""))
    p.add_argument("--log-dir", default=environ.get("AIP_TENSORBOARD_LOG_DIR", ""))
    p.add_argument("--model", default=builder.DEFAULT_BUILDER, help="the model builder, package.module:function")
    p.add_argument("--epochs", type=_integer, default=10)
    p.add_argument(
        "--batch-workers",
        type=_integer,
        default=0,
        help="train at the global batch of this many workers (0: this cluster's), as a study's trials do for the "
        "final training's workers: --batch-size x N x this worker's replicas",
    )
    p.add_argument("--steps-per-epoch", type=_integer, default=0, help="0 = one pass over the training split")
    p.add_argument(
        "--steps-per-execution",
        type=_integer,
        default=32,
        help="training steps per call of the compiled step (at most an epoch's): fewer Python round trips per step",
    )
    p.add_argument("--cache-max-mb", type=_integer, default=512, help="cache the training split in memory below this")
    p.add_argument(
        "--mixed-precision",
        choices=PRECISIONS,
        default="none",
        help="Keras mixed-precision policy (the model's output layer must stay float32)",
    )
    p.add_argument(
        "--hypertune-metric-tag",
        default=environ.get(METRIC_TAG_ENV) or DEFAULT_METRIC,
        help=f"the metric reported to hypertune each epoch, under its own name: one of {', '.join(METRIC_GOALS)} "
        f"(default: ${METRIC_TAG_ENV}, else {DEFAULT_METRIC})",
    )
    p.add_argument(
        "--warm-start-from",
        default="",
        help="a kept checkpoint folder (e.g. a trial's <checkpoint-dir>/best): start from its weights unless resuming",
    )
    return p


def declared(model: str) -> declarations.Declaration:
    """The hyperparameters a training of the builder `model` takes (read from the sources, nothing imported);
    BuilderError when the builder breaks the declaration's rules or takes the name of a trainer flag."""
    flags = tuple(a.dest for a in _parser({})._actions if a.dest != "help")
    return declarations.declare(model, reserved=flags)


def parse_args(argv=None, environ=os.environ) -> argparse.Namespace:
    """The trainer's flags; `hyperparameters` holds every declared hyperparameter's value (given or default), typed
    by its declaration, and `declaration` the declaration."""
    p = _parser(environ)
    argv = _underscored_flags(argv if argv is not None else sys.argv[1:])
    first = argparse.ArgumentParser(add_help=False)  # the builder, whose declaration adds the other flags
    first.add_argument("--model", default=builder.DEFAULT_BUILDER)
    model = first.parse_known_args(argv)[0].model
    try:
        builder.parse(model)
        declaration = declared(model)
    except builder.BuilderError as e:
        p.error(f"--model: {e}")
    for h in (*declaration.training.values(), *declaration.builder.values()):
        p.add_argument(flag(h.name), type=_typed(h), default=h.default, help=f"hyperparameter {h}, default {h.default}")
    args, unknown = p.parse_known_args(argv)
    if unknown:
        name = unknown[0].partition("=")[0]
        try:
            declaration[name.removeprefix("--").replace("-", "_")]
        except KeyError as e:
            p.error(f"{name}: {e.args[0]}")
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.declaration = declaration
    args.hyperparameters = {name: getattr(args, name) for name in (*declaration.training, *declaration.builder)}
    for name in ("epochs", "batch_size", "steps_per_execution"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.batch_workers < 0:
        p.error("--batch-workers must be >= 0")
    if args.learning_rate <= 0:
        p.error("--learning-rate must be > 0")
    if args.hypertune_metric_tag not in METRIC_GOALS:
        p.error(
            f"--hypertune-metric-tag: the trainer logs no metric {args.hypertune_metric_tag!r}; it logs "
            f"{', '.join(METRIC_GOALS)}"
        )
    if not args.job_dir:
        if not args.model_dir:
            p.error("give --job-dir or --model-dir (or set AIP_MODEL_DIR)")
        args.job_dir = os.path.dirname(args.model_dir.rstrip("/"))
    args.job_dir = args.job_dir.rstrip("/")
    args.model_dir = (args.model_dir or f"{args.job_dir}/model").rstrip("/")
    args.checkpoint_dir = (args.checkpoint_dir or f"{args.job_dir}/checkpoints").rstrip("/")
    args.log_dir = (args.log_dir or f"{args.job_dir}/logs").rstrip("/")
    return args
