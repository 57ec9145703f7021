"""Data prep's source rules: the built-in data sets, image decoding and the default image size, and which kind a
source is (`source_kind`; the fingerprint step shares it). Reading sources in pieces is `components.lib.source_reads`.

A built-in source yields candidates `(key, label, load)`: `key` identifies the record (and decides its split),
`load()` returns the example (uint8 H×W×C image or float feature vector).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from components.lib.storage import read_object
from trainer.schema import IMAGE, TABULAR

IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg"}
GRAYSCALE_MODES = {"1", "L", "LA", "I", "I;16", "F"}
MAX_IMAGE_SIZE = 180  # image folders: the model input is the images' own size up to this (the codelab's input)
BUILTINS = ("digits", "iris", "wine")


class DataError(ValueError):
    """The data cannot be prepared (user-facing message)."""


class BadRecord(Exception):
    """One record is unreadable or malformed; it is quarantined."""


@dataclass
class Source:
    kind: str
    labels: list[str]
    input_shape: list[int]
    candidates: list[tuple[str, str, Callable]]
    feature_names: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # files outside any class folder
    size_reason: str = ""  # images: why the input has its size


def check_builtin(name: str) -> str:
    """`name` if it is a built-in dataset, else the DataError."""
    if name not in BUILTINS:
        raise DataError(f"unknown built-in dataset {name!r}; choose one of: {', '.join(BUILTINS)}")
    return name


def builtin(name: str) -> Source:
    """scikit-learn's bundled datasets: `digits` (8×8 grayscale images), `iris` and `wine` (tabular)."""
    from sklearn import datasets

    check_builtin(name)
    if name == "digits":
        bunch = datasets.load_digits()
        images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
        labels = [str(int(t)) for t in bunch.target]
        candidates = [(f"digits/{i:04d}", labels[i], lambda img=img: img) for i, img in enumerate(images)]
        return Source(
            IMAGE, sorted(set(labels), key=int), [8, 8, 1], candidates, size_reason="8 px: the data set's own size"
        )
    bunch = getattr(datasets, f"load_{name}")()
    names = [str(n) for n in bunch.target_names]
    candidates = [
        (f"{name}/{i:04d}", names[t], lambda row=row: row.astype(np.float32))
        for i, (row, t) in enumerate(zip(bunch.data, bunch.target))
    ]
    return Source(TABULAR, names, [bunch.data.shape[1]], candidates, [str(f) for f in bunch.feature_names])


class _FileBytes(io.BytesIO):
    """The content of the file at `path` (a local path or a gs:// URI), read in one go (one request for an object):
    PIL parses an image in memory faster than through a file, whose many small reads and seeks take longer than the
    header parse itself. Its repr is the path's, which PIL names in "cannot identify image file ..."."""

    def __init__(self, path: str):
        super().__init__(read_object(path))
        self.path = path

    def __repr__(self) -> str:
        return repr(self.path)


def load_image(path: str, size: int, channels: int) -> np.ndarray:
    """The image at `path` (a local path or a gs:// URI) as a uint8 size×size×channels array (bilinear resize);
    BadRecord when unreadable."""
    from PIL import Image, UnidentifiedImageError

    mode = "L" if channels == 1 else "RGB"
    try:
        with Image.open(_FileBytes(path)) as img:
            img.load()
            pixels = img if img.mode == mode else img.convert(mode)
            if pixels.size != (size, size):  # a resize to the same size only copies
                pixels = pixels.resize((size, size), Image.Resampling.BILINEAR)
            data = pixels.tobytes()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise BadRecord(f"unreadable image: {e}") from None
    return np.frombuffer(data, np.uint8).reshape(size, size, channels)


def image_header(path: str) -> tuple[str, int] | None:
    """The image's mode and shorter side from its header (no decoding); None when unreadable (it is quarantined
    later, with the decoder's reason)."""
    from PIL import Image

    try:
        with Image.open(_FileBytes(path)) as img:
            return img.mode, min(img.size)
    except Exception:
        return None


def default_image_size(shorter_sides: list[int], cap: int = MAX_IMAGE_SIZE) -> tuple[int, str]:
    """The model input of an image folder without an explicit size: the smallest image's shorter side, so that no
    image is upsampled, capped at `cap` px; and the reason, for the report."""
    if not shorter_sides:
        return cap, f"{cap} px: the default (no readable image to measure)"
    low, high = min(shorter_sides), max(shorter_sides)
    spread = f"{low} px" if low == high else f"{low}-{high} px"
    if low >= cap:
        return cap, f"{cap} px: the cap for image folders (the images' shorter sides are {spread})"
    return low, (
        f"{low} px: the images' own size (shorter sides {spread}; the smallest sets the size, so no image "
        f"is upsampled; the cap is {cap} px)"
    )


def folder_files(root: str) -> list[str]:
    """Every file under `root` (relative paths, sorted): what an image folder source reads, the files outside any
    class folder included (they are listed as ignored)."""
    return sorted(
        os.path.relpath(os.path.join(dirpath, name), root) for dirpath, _, names in os.walk(root) for name in names
    )


def is_glob(uri: str) -> bool:
    """A pattern of CSV files (`data/part-*.csv`)."""
    return any(c in uri for c in "*?[")


def file_kind(data_source: str, path: str) -> str:
    """The kind of an existing file source: "csv", else the unsupported-source DataError."""
    if path.lower().endswith(".csv"):
        return "csv"
    raise DataError(f"unsupported data source {data_source!r}: use builtin:NAME, an image folder or a .csv file")


def source_kind(data_source: str, local_path: str) -> str:
    """What `data_source` is, `local_path` being where a file or folder source is (staged) locally: "builtin",
    "folder" (an image folder) or "csv" (a file, or a glob of files); a DataError for an unknown, missing or
    unsupported source."""
    if data_source.startswith("builtin:"):
        check_builtin(data_source.split(":", 1)[1])
        return "builtin"
    if is_glob(local_path):
        return "csv"
    if os.path.isdir(local_path):
        return "folder"
    if local_path.lower().endswith(".csv") and not os.path.isfile(local_path):
        raise DataError(f"CSV file not found: {local_path}")
    if not os.path.exists(local_path):
        raise DataError(f"data source not found: {data_source}")
    return file_kind(data_source, local_path)
