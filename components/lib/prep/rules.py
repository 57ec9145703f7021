"""Data prep's rules, one record at a time: the Beam transforms (components.lib.prep.pipeline) call them, the tests reach
them directly.

- Split: a salted hash of the record's key, so a record keeps its split across reruns, shard counts, worker counts
  and runners.
- Shard: another salted hash of the key, among a count fixed before the data is read (`shard_count` of the expected
  number of records): no record waits for the others to learn where it goes.
- Order within a shard: a third hash of the key (then the key, then the record's place in the source): shards hold
  no class runs, so a modest shuffle buffer mixes well, and the order does not depend on how the work was split.
"""

from __future__ import annotations

import functools
import math
import struct
from hashlib import sha256


@functools.lru_cache(maxsize=8)
def _prefixes(salt: str) -> tuple[bytes, bytes, bytes]:
    return f"{salt}:".encode(), f"shard{salt}:".encode(), f"order{salt}:".encode()


def key_hashes(key: str, salt: str = "") -> tuple[int, int, int]:
    """The key's split, shard and order hashes: the first 64 bits (big-endian) of SHA-256 of `salt:key`,
    `shard<salt>:key` and `order<salt>:key`."""
    data = key.encode()
    split, shard, order = _prefixes(salt)
    return (
        _first64(sha256(split + data).digest())[0],
        _first64(sha256(shard + data).digest())[0],
        _first64(sha256(order + data).digest())[0],
    )


_first64 = struct.Struct(">Q").unpack_from


def route(
    key: str, position: tuple, val_fraction: float, test_fraction: float, shards: dict[str, int], salt: str = ""
) -> tuple[str, int, tuple]:
    """A record's split, its shard among `shards[split]`, and its order within the shard.

    - split: its split hash as a point in [0, 1): test below `test_fraction`, then val, then train;
    - shard: its shard hash scaled to the split's shard count;
    - order: by its order hash, then the key, then its place in the source (duplicate keys: identical CSV rows)."""
    split_hash, shard_hash, order_hash = key_hashes(key, salt)
    point = split_hash / 2**64
    split = "test" if point < test_fraction else "val" if point < test_fraction + val_fraction else "train"
    return split, shard_hash * shards[split] >> 64, (order_hash, key, position)


def shard_count(expected: float, num_workers: int, examples_per_shard: int) -> int:
    """A multiple of the worker count, at most `examples_per_shard` examples each, and up to 4 files per worker
    (for parallel reads) while each file still gets at least 100 examples."""
    per_worker = max(
        math.ceil(expected / (num_workers * examples_per_shard)), min(4, int(expected // (num_workers * 100))), 1
    )
    return num_workers * per_worker
