"""Trainer entry point: `python -m trainer.task --data-dir DIR [--job-dir DIR] [--model MODULE:FUNCTION]
[hyperparameters]`.

Output locations follow Vertex AI: `AIP_MODEL_DIR`, `AIP_CHECKPOINT_DIR` and `AIP_TENSORBOARD_LOG_DIR` when set,
else `<job-dir>/model`, `<job-dir>/checkpoints`, `<job-dir>/logs`. The chief also writes `<job-dir>/metrics.json`
and `<job-dir>/history.jsonl` (one line per completed epoch, across restarts), and prints the progress lines of
`trainer.progress` (stage `train`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from trainer import builder
from trainer.environment import use_legacy_keras

use_legacy_keras()


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
    p = argparse.ArgumentParser(prog="python -m trainer.task", description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True, help="prepared dataset directory (local or gs://)")
    p.add_argument("--job-dir", default="", help="base output directory (default: parent of AIP_MODEL_DIR)")
    p.add_argument("--model-dir", default=environ.get("AIP_MODEL_DIR", ""))
    p.add_argument("--checkpoint-dir", default=environ.get("AIP_CHECKPOINT_DIR", ""))
    p.add_argument("--log-dir", default=environ.get("AIP_TENSORBOARD_LOG_DIR", ""))
    p.add_argument("--model", default=builder.DEFAULT_BUILDER, help="the model builder, package.module:function")
    p.add_argument("--epochs", type=_integer, default=10)
    p.add_argument("--batch-size", type=_integer, default=32, help="per-replica batch size")
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
    p.add_argument("--hypertune-metric-tag", default="accuracy", help="tag of the validation accuracy report")
    args = p.parse_args(_underscored_flags(argv if argv is not None else sys.argv[1:]))
    for name in ("epochs", "batch_size", "hidden_units", "filters", "steps_per_execution"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 <= args.dropout < 1:
        p.error("--dropout must be in [0, 1)")
    if args.learning_rate <= 0:
        p.error("--learning-rate must be > 0")
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


def validation_steps(stats: dict, global_batch: int, workers: int) -> int:
    """Steps of one pass over the validation split, which every worker reads whole in batches of its share of the
    global batch, the last one partial: with `steps_per_execution` above 1, Keras must be given the count."""
    return max(1, math.ceil(stats["splits"]["val"]["examples"] * workers / global_batch))


def main(argv=None) -> int:
    args = parse_args(argv)
    from trainer import distribute, fast_exit

    fast_exit.skip_exit_collection()

    cluster = distribute.cluster_from_env()  # sets TF_CONFIG from CLUSTER_SPEC before the strategy exists
    import numpy as np
    import tensorflow as tf

    from trainer import callbacks, data, model as models, warmup

    build = builder.load(args.model)  # a missing builder fails before the cluster forms
    started = time.time()
    strategy = distribute.make_strategy(cluster)
    stats = data.load_stats(args.data_dir)
    shards = len(data.split_files(args.data_dir, "train"))
    if shards < cluster.num_workers:  # FILE auto-sharding gives each worker its own files: too few fails mid-step
        raise SystemExit(
            f"error: {args.data_dir} has {shards} train shard(s) for {cluster.num_workers} workers: prepare it with "
            f"num_workers >= {cluster.num_workers} (prepare-data's `workers`)"
        )
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    train_bytes = stats["splits"]["train"].get("bytes", 0)
    train_ds = data.make_dataset(
        args.data_dir,
        "train",
        stats,
        global_batch,
        training=True,
        seed=args.seed,
        worker_index=cluster.rank,
        cache=train_bytes <= args.cache_max_mb * 2**20,
    )
    val_ds = data.make_dataset(args.data_dir, "val", stats, global_batch, training=False)
    steps = args.steps_per_epoch or data.steps_per_epoch(stats, "train", global_batch)

    execution = min(args.steps_per_execution, steps)
    models.keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = build(stats, args)
        builder.check(model, stats, args.model)
        model.compile(
            optimizer=models.keras.optimizers.Adam(args.learning_rate),
            loss=models.keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
            steps_per_execution=execution,
        )

    log_dir = distribute.write_location(args.log_dir, cluster)
    backup_dir = f"{args.checkpoint_dir}/backup"
    epoch_log = callbacks.EpochLog(
        f"{args.job_dir}/history.jsonl" if cluster.is_chief else None,
        args.hypertune_metric_tag,
        resume=bool(tf.io.gfile.glob(f"{backup_dir}/*")),  # a backup left by an interrupted attempt
    )
    model.fit(
        train_ds,
        epochs=args.epochs,
        steps_per_epoch=steps,
        validation_data=val_ds,
        # one step a call: Keras finds the end of the validation stream itself (tests compare the two)
        validation_steps=validation_steps(stats, global_batch, cluster.num_workers) if execution > 1 else None,
        verbose=2,
        callbacks=[
            models.keras.callbacks.BackupAndRestore(backup_dir),
            models.keras.callbacks.TensorBoard(log_dir),
            epoch_log,
            *([callbacks.ProgressLog(global_batch)] if cluster.is_chief else []),
        ],
    )

    model_dir = distribute.write_location(args.model_dir, cluster)
    model.save(model_dir, save_format="tf", signatures=models.serving_signatures(model, stats))
    distribute.discard(model_dir, args.model_dir)
    distribute.discard(log_dir, args.log_dir)
    if cluster.is_chief:
        tf.io.gfile.makedirs(f"{args.model_dir}/assets.extra")
        with tf.io.gfile.GFile(f"{args.model_dir}/{data.LABELS_FILE}", "w") as f:
            f.write("\n".join(stats["labels"]) + "\n")
        if stats.get("feature_names"):  # batch prediction matches CSV headers / object fields to these by name
            with tf.io.gfile.GFile(f"{args.model_dir}/{data.FEATURES_FILE}", "w") as f:
                f.write("\n".join(stats["feature_names"]) + "\n")
        pixels = next(iter(val_ds))[0]
        examples = tf.cast(pixels, tf.float32).numpy()
        input_name = model.inputs[0].name.split(":")[0]  # the serving signature's input
        requests: list = [{input_name: examples[:n]} for n in (1, 8, len(examples))]
        if stats["kind"] == data.IMAGE:  # the encoded-image signature too, on PNGs of the same examples
            encoded = np.array([tf.io.encode_png(image).numpy() for image in pixels[:8]], dtype=object)
            requests += [(data.IMAGE_BYTES_SIGNATURE, {data.IMAGE_BYTES_INPUT: encoded[:n]}) for n in (1, 8)]
        warmup.write_warmup_requests(args.model_dir, requests)
        final = epoch_log.last or epoch_log.previous  # a restart after the last epoch trains no epoch
        summary = {
            "val_accuracy": final.get("val_accuracy"),
            "val_loss": final.get("val_loss"),
            "train_accuracy": final.get("accuracy"),
            "train_loss": final.get("loss"),
            "epochs": args.epochs,
            "steps_per_epoch": steps,
            "global_batch_size": global_batch,
            "num_workers": cluster.num_workers,
            "strategy": distribute.strategy_name(strategy),
            "model": args.model,
            "seconds": round(time.time() - started, 2),
            "model_dir": args.model_dir,
            "hyperparameters": {k: getattr(args, k) for k in callbacks.HPARAMS},
        }
        with tf.io.gfile.GFile(f"{args.job_dir}/metrics.json", "w") as f:
            json.dump(summary, f, indent=2)
        print(f"[trainer] saved model to {args.model_dir}; val_accuracy={summary['val_accuracy']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
