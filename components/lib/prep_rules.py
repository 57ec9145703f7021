"""Data prep's rules, one record at a time: the Beam transforms (components.lib.prep_pipeline) call them, the tests reach
them directly.

- Split: a salted hash of the record's key, so a record keeps its split across reruns, shard counts, worker counts
  and runners.
- Shard: another salted hash of the key, among a count fixed before the data is read (`shard_count` of the expected
  number of records): no record waits for the others to learn where it goes.
- Order within a shard: a third hash of the key (then the key, then the record's place in the source): shards hold
  no class runs, so a modest shuffle buffer mixes well, and the order does not depend on how the work was split.
"""

from __future__ import annotations

import hashlib
import math


def key_point(key: str, salt: str = "") -> float:
    """A deterministic pseudo-random point in [0, 1) for a record key (SHA-256)."""
    return key_hash(key, salt) / 2**64


def key_hash(key: str, salt: str = "") -> int:
    """The first 64 bits of SHA-256(salt:key)."""
    return int.from_bytes(hashlib.sha256(f"{salt}:{key}".encode()).digest()[:8], "big")


def assign_split(key: str, val_fraction: float, test_fraction: float, salt: str = "") -> str:
    """Deterministic split from the key's hash point: test, then val, then train."""
    point = key_point(key, salt)
    if point < test_fraction:
        return "test"
    if point < test_fraction + val_fraction:
        return "val"
    return "train"


def shard_count(expected: float, num_workers: int, examples_per_shard: int) -> int:
    """A multiple of the worker count, at most `examples_per_shard` examples each, and up to 4 files per worker
    (for parallel reads) while each file still gets at least 100 examples."""
    per_worker = max(
        math.ceil(expected / (num_workers * examples_per_shard)), min(4, int(expected // (num_workers * 100))), 1
    )
    return num_workers * per_worker


def shard_of(key: str, shards: int, salt: str = "") -> int:
    """The shard of a record among `shards`, from its key's hash."""
    return key_hash(key, "shard" + salt) * shards >> 64


def order_key(key: str, position: tuple, salt: str = "") -> tuple:
    """Where a record goes within its shard: by a hash of its key, then the key, then its place in the source
    (duplicate keys: identical CSV rows)."""
    return key_hash(key, "order" + salt), key, position
