"""Trainer entry point: `python -m trainer.task --data-dir DIR [--job-dir DIR] [--model MODULE:FUNCTION]
[hyperparameters]`.

Output locations follow Vertex AI: `AIP_MODEL_DIR`, `AIP_CHECKPOINT_DIR` and `AIP_TENSORBOARD_LOG_DIR` when set,
else `<job-dir>/model`, `<job-dir>/checkpoints`, `<job-dir>/logs`. The chief also writes `<job-dir>/metrics.json`
and `<job-dir>/history.jsonl` (one line per completed epoch, across restarts), and prints the progress lines of
`core.progress` (stage `train`). The best and the last epoch's checkpoints are kept under the checkpoint folder
(`trainer.checkpoints`); a restarted training resumes after `last`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

from trainer import builder, flags, hyperparameters
from trainer.environment import IN_PROCESS_ENV, use_legacy_keras

use_legacy_keras()

# `--optimizer` (hyperparameters.training) → its tf-keras class
OPTIMIZERS = {
    "adam": "Adam",
    "adamw": "AdamW",
    "nadam": "Nadam",
    "sgd": "SGD",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
}


def validation_steps(stats: dict, global_batch: int, workers: int) -> int:
    """Steps of one pass over the validation split, which every worker reads whole in batches of its share of the
    global batch, the last one partial: with `steps_per_execution` above 1, Keras must be given the count."""
    return max(1, math.ceil(stats["splits"]["val"]["examples"] * workers / global_batch))


def set_precision(policy: str, gpus: list) -> None:
    """Set Keras's global dtype policy (`none`: float32, also resetting a warm runner's earlier trial); a warning for
    mixed_float16 without a GPU (TensorFlow runs float16 on a CPU, slowly)."""
    from trainer import model as models

    if policy == "mixed_float16" and not gpus:
        print(
            "[trainer] warning: --mixed-precision mixed_float16 without a GPU: float16 runs slowly on a CPU", flush=True
        )
    models.keras.mixed_precision.set_global_policy("float32" if policy == "none" else policy)


def main(argv=None) -> int:
    args = flags.parse_args(argv)
    from core import fast_exit
    from trainer import distribute

    fast_exit.skip_exit_collection()

    try:
        cluster = distribute.cluster_from_env()  # sets TF_CONFIG (CLUSTER_SPEC, JobSet) before the strategy exists
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    import numpy as np
    import tensorflow as tf

    from core import warmup
    from trainer import callbacks, checkpoints, data, model as models

    build = builder.load(args.model)  # a missing builder fails before the cluster forms
    own = hyperparameters.training(**{name: args.hyperparameters[name] for name in args.declaration.training})
    started = time.time()
    strategy = distribute.make_strategy(cluster)
    stats = data.load_stats(args.data_dir)
    shards = len(data.split_files(args.data_dir, "train"))
    if shards < cluster.num_workers:  # FILE auto-sharding gives each worker its own files: too few fails mid-step
        raise SystemExit(
            f"error: {args.data_dir} has {shards} train shard(s) for {cluster.num_workers} workers: prepare it with "
            f"num_workers >= {cluster.num_workers} (prepare-data's `workers`)"
        )
    global_batch = flags.global_batch(args, strategy.num_replicas_in_sync, cluster.num_workers)
    train_bytes = stats["splits"]["train"].get("bytes", 0)
    train_ds = data.make_dataset(
        args.data_dir,
        "train",
        stats,
        global_batch,
        training=True,
        seed=own.seed,
        worker_index=cluster.rank,
        cache=train_bytes <= args.cache_max_mb * 2**20,
    )
    val_ds = data.make_dataset(args.data_dir, "val", stats, global_batch, training=False)
    steps = args.steps_per_epoch or data.steps_per_epoch(stats, "train", global_batch)

    execution = min(args.steps_per_execution, steps)
    models.keras.utils.set_random_seed(own.seed)
    set_precision(args.mixed_precision, tf.config.list_physical_devices("GPU"))
    with strategy.scope():
        model = build(stats, **{name: args.hyperparameters[name] for name in args.declaration.builder})
        builder.check(model, stats, args.model)
        model.compile(
            optimizer=getattr(models.keras.optimizers, OPTIMIZERS[own.optimizer])(own.learning_rate),
            loss=models.keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
            steps_per_execution=execution,
        )

    resume = checkpoints.resume_point(args.checkpoint_dir)
    try:
        checkpoints.restore_last(model, resume)
        kept = (
            checkpoints.warm_start(model, args.warm_start_from) if args.warm_start_from and not resume.epochs else None
        )
    except checkpoints.CheckpointError as e:
        raise SystemExit(f"error: {e}") from None
    if resume.last:
        print(
            f"[trainer] resuming after epoch {resume.epochs} from the last checkpoint ({resume.last.path})", flush=True
        )
    if kept:
        print(f"[trainer] warm start from {kept.path} (epoch {kept.epoch}: {kept.metric}={kept.value})", flush=True)
    log_dir = distribute.write_location(args.log_dir, cluster)
    epoch_log = callbacks.EpochLog(
        f"{args.job_dir}/history.jsonl" if cluster.is_chief else None, args.hypertune_metric_tag, resume.epochs
    )

    def finish() -> None:
        """The model and the training's records written (every worker saves: MWMS's save is collective)."""
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
            if stats.get("profile"):  # the data drift check compares later data sets with it
                with tf.io.gfile.GFile(f"{args.model_dir}/{data.PROFILE_FILE}", "w") as f:
                    json.dump(stats["profile"], f)
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
                "mixed_precision": args.mixed_precision,
                "devices": distribute.training_devices([d.name for d in tf.config.list_physical_devices("GPU")]),
                "model": args.model,
                "seconds": round(time.time() - started, 2),
                "model_dir": args.model_dir,
                "hyperparameters": args.hyperparameters,
            }
            with tf.io.gfile.GFile(f"{args.job_dir}/metrics.json", "w") as f:
                json.dump(summary, f, indent=2)
            print(f"[trainer] saved model to {args.model_dir}; val_accuracy={summary['val_accuracy']}", flush=True)

    model.fit(
        train_ds,
        epochs=args.epochs,
        steps_per_epoch=steps,
        validation_data=val_ds,
        # one step a call: Keras finds the end of the validation stream itself (tests compare the two)
        validation_steps=validation_steps(stats, global_batch, cluster.num_workers) if execution > 1 else None,
        initial_epoch=resume.epochs,
        verbose=2,
        callbacks=[
            epoch_log,  # first: no checkpoint is ahead of the history it trims to on a restart
            checkpoints.KeptCheckpoints(args.checkpoint_dir, args.hypertune_metric_tag, cluster, resume),
            models.keras.callbacks.TensorBoard(log_dir),
            *([callbacks.ProgressLog(global_batch)] if cluster.is_chief else []),
            # last: after TensorBoard's flush
            callbacks.FinishAndExit(finish, None if os.environ.get(IN_PROCESS_ENV) else os._exit),
        ],
    )
    return 0  # in a process that runs on after the training (IN_PROCESS_ENV)


def run(argv=None) -> int:
    """`main`, with the exit status schedulers read: `distribute.PEER_LOST` when a peer was lost (retried), else an
    error propagates (status 1: not retried)."""
    from trainer import distribute

    try:
        return main(argv)
    except Exception as e:
        status = distribute.peer_lost_status(e)
        if status is None:
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"[trainer] lost a peer, exiting with {status} to be restarted: {type(e).__name__}: {first}", flush=True)
        return status


if __name__ == "__main__":
    sys.exit(run())
