"""The prepared-data contract (TFRecord shards + stats.json) and the tf.data input pipeline.

Layout of a prepared dataset directory (local path or gs://):
  {split}-{shard:05d}-of-{num_shards:05d}.tfrecord   split in train/val/test
  stats.json                                         see `components.prepare_data`
  quarantine.jsonl                                   skipped records with their reason
Each record is a `tf.train.Example` with `key` (bytes, source id), `label` (int64 index into the vocabulary) and
either `image` (raw uint8 bytes of an H×W×C array) or `features` (float list).
"""

from __future__ import annotations

import json
import math

import tensorflow as tf

from core.schema import (  # noqa: F401 (re-exported)
    FEATURES_FILE,
    IMAGE,
    IMAGE_BYTES_INPUT,
    IMAGE_BYTES_SIGNATURE,
    LABELS_FILE,
    PROFILE_FILE,
    SPLITS,
    TABULAR,
    shard_name,
)


def load_stats(data_dir: str) -> dict:
    with tf.io.gfile.GFile(f"{data_dir}/stats.json") as f:
        return json.load(f)


def _parser(stats: dict):
    """Parse a batch of serialized examples into (inputs, labels); images stay uint8 (the model casts and rescales,
    so batches are 4× smaller than float32 on their way to the device)."""
    shape = stats["input_shape"]
    if stats["kind"] == IMAGE:
        spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    else:
        spec = {"features": tf.io.FixedLenFeature(shape, tf.float32), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        if stats["kind"] == IMAGE:
            inputs = tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), [-1, *shape])
        else:
            inputs = parsed["features"]
        return inputs, parsed["label"]

    return parse


def split_files(data_dir: str, split: str) -> list[str]:
    files = sorted(tf.io.gfile.glob(f"{data_dir}/{split}-*.tfrecord"))
    if not files:
        raise FileNotFoundError(f"no {split} shards in {data_dir}")
    return files


def shuffle_buffer(stats: dict, split: str, max_bytes: int = 64 * 2**20) -> int:
    """Examples in the shuffle buffer: the whole split when small, else about `max_bytes` worth (≥ 256)."""
    info = stats["splits"][split]
    per_example = info.get("bytes", 0) / max(1, info["examples"])
    by_memory = int(max_bytes / per_example) if per_example else info["examples"]
    return max(1, min(info["examples"], 10_000, max(256, by_memory)))


def make_dataset(
    data_dir: str,
    split: str,
    stats: dict,
    global_batch_size: int,
    training: bool,
    seed: int = 0,
    worker_index: int = 0,
    cache: bool = False,
) -> tf.data.Dataset:
    """Batches of `global_batch_size` parsed (inputs, labels) from a split's shards.

    Training: each worker reads its own files (FILE auto-sharding; the file list shuffled with the shared `seed`) as
    an endless stream that repeats before it is batched, so every batch is full, even on a worker whose files hold
    less than one batch, and `fit` runs the same `steps_per_epoch` on every worker. With `cache` (a split that fits
    in memory) the first pass's parsed batches are kept and each epoch replays them in a new order (the codelab's
    `cache().shuffle()`); without it each epoch re-reads the files through an example shuffle buffer
    (`shuffle_buffer`). Prep writes records in hash order, so no buffer has to break up class runs. Evaluation:
    every worker reads the whole split once, in order.
    """
    files = tf.data.Dataset.from_tensor_slices(split_files(data_dir, split))
    if training:
        files = files.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not training,
    )
    if training and cache:
        # prep's hash order is already a random permutation, frozen by the cache; the last batch of a pass may be
        # partial (or the only one, on a worker with little data): `rebatch` joins it with the next pass's
        batches = max(1, stats["splits"][split]["examples"] // global_batch_size)
        ds = ds.batch(global_batch_size).map(_parser(stats), num_parallel_calls=tf.data.AUTOTUNE).cache()
        ds = ds.shuffle(min(batches, 64), seed=seed + worker_index, reshuffle_each_iteration=True)
        ds = ds.repeat().rebatch(global_batch_size, drop_remainder=True)
    elif training:
        ds = ds.shuffle(shuffle_buffer(stats, split), seed=seed + worker_index).repeat()
        ds = ds.batch(global_batch_size, drop_remainder=True).map(_parser(stats), num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.batch(global_batch_size).map(_parser(stats), num_parallel_calls=tf.data.AUTOTUNE)
        if cache:
            ds = ds.cache()
    options = tf.data.Options()
    policy = tf.data.experimental.AutoShardPolicy.FILE if training else tf.data.experimental.AutoShardPolicy.OFF
    options.experimental_distribute.auto_shard_policy = policy
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options)


def steps_per_epoch(stats: dict, split: str, global_batch_size: int) -> int:
    """Steps of one pass over the split (the last, partial batch rounded up: the stream repeats before batching)."""
    return max(1, math.ceil(stats["splits"][split]["examples"] / global_batch_size))
