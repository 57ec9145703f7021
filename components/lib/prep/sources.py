"""Data prep's source rules: the built-in data sets, image decoding and the default image size, and which kind a
source is (`source_kind`; the fingerprint step shares it). Reading sources in pieces is `components.lib.prep.source_reads`.

A built-in source yields candidates `(key, label, load)`: `key` identifies the record (and decides its split),
`load()` returns the example (uint8 H×W×C image or float feature vector).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from core.schema import IMAGE, TABULAR
from core.storage import read_object

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
    check_builtin(name)
    if name == "digits":
        table = np.loadtxt(_bundled("digits.csv.gz"), delimiter=",")
        images = np.round(table[:, :-1].reshape(-1, 8, 8) * (255.0 / 16.0)).astype(np.uint8)[..., None]
        labels = [str(int(t)) for t in table[:, -1]]
        candidates = [(f"digits/{i:04d}", labels[i], lambda img=img: img) for i, img in enumerate(images)]
        return Source(
            IMAGE, sorted(set(labels), key=int), [8, 8, 1], candidates, size_reason="8 px: the data set's own size"
        )
    with open(_bundled(f"{name}{'_data' if name == 'wine' else ''}.csv"), encoding="utf-8") as f:
        names = f.readline().strip().split(",")[2:]  # samples, features, the class names
        table = np.loadtxt(f, delimiter=",")
    data, target = table[:, :-1], table[:, -1].astype(int)
    candidates = [
        (f"{name}/{i:04d}", names[t], lambda row=row: row.astype(np.float32))
        for i, (row, t) in enumerate(zip(data, target))
    ]
    return Source(TABULAR, names, [data.shape[1]], candidates, FEATURE_NAMES[name])


FEATURE_NAMES = {  # scikit-learn's names for the tabular sets' columns (its loaders name them in code)
    "iris": ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"],
    "wine": [
        "alcohol",
        "malic_acid",
        "ash",
        "alcalinity_of_ash",
        "magnesium",
        "total_phenols",
        "flavanoids",
        "nonflavanoid_phenols",
        "proanthocyanins",
        "color_intensity",
        "hue",
        "od280/od315_of_diluted_wines",
        "proline",
    ],
}


def _bundled(filename: str) -> str:
    """A data file scikit-learn ships (sklearn/datasets/data/), found without importing scikit-learn, whose import
    (scipy's with it) would outweigh a built-in source's prep. tests/unit/components/test_prepare_data.py checks what
    is read here against scikit-learn's own loaders."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the built-in data sets need scikit-learn installed")
    return os.path.join(spec.submodule_search_locations[0], "datasets", "data", filename)


SMALL_IMAGE_BYTES = 32 << 10  # an image file of a gs:// folder this small, read whole for its header, goes to its
# decoder with its bytes: one request, not two (its bytes ride in the runs; a shard's merge holds at most
# examples_per_shard of them). From a local disk, reading a file again costs less than carrying its bytes
HEADER_BYTES = 64 << 10  # what `image_header` reads of a file first: a JPEG's or PNG's header, unless its metadata
# outgrows it (then the whole file is read)
JPEG_SPACES = {"Gray": "L", "YCbCr": "RGB"}  # JPEG colour spaces libjpeg-turbo decodes here, and their PIL modes


class _FileBytes(io.BytesIO):
    """A file's bytes for PIL, which parses an image in memory faster than through a file (whose many small reads
    and seeks take longer than the header parse itself). Its repr is the file's path, which PIL names in "cannot
    identify image file ..."."""

    def __init__(self, data: bytes, path: str):
        super().__init__(data)
        self.path = path

    def __repr__(self) -> str:
        return repr(self.path)


def load_image(path: str, size: int, channels: int, data: bytes | None = None) -> np.ndarray:
    """The image at `path` (a local path or a gs:// URI; read in one request, unless its bytes are given as `data`)
    as a uint8 size×size×channels array (bilinear resize); BadRecord when unreadable. JPEGs go to `_decoded_jpeg`,
    the rest (and any JPEG it leaves) to PIL."""
    from PIL import Image, UnidentifiedImageError

    mode = "L" if channels == 1 else "RGB"
    try:
        if data is None:
            data = read_object(path)
        pixels = _decoded_jpeg(data, size, channels)
        if pixels is not None:
            return pixels
        with Image.open(_FileBytes(data, path)) as img:
            img.load()
            return _resized(img if img.mode == mode else img.convert(mode), size, channels)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise BadRecord(f"unreadable image: {e}") from None


def _resized(img, size: int, channels: int) -> np.ndarray:
    """A PIL image in mode L or RGB, resized to size×size (bilinear) when it is not, as an array."""
    from PIL import Image

    if img.size != (size, size):  # a resize to the same size only copies
        img = img.resize((size, size), Image.Resampling.BILINEAR)
    return np.frombuffer(img.tobytes(), np.uint8).reshape(size, size, channels)


def _decoded_jpeg(data: bytes, size: int, channels: int) -> np.ndarray | None:
    """A grayscale or YCbCr JPEG decoded by libjpeg-turbo through simplejpeg (the library PIL decodes JPEGs with,
    at the same settings: the same pixels, with no header parsed in Python), then resized as PIL's are. A JPEG with
    both sides at least 4× `size` is decoded at a reduced DCT scale that keeps both at least 2× `size` (what
    Pillow's `thumbnail` does), so a large photo is never decoded at full size. None for any other image or any
    error (PIL then decodes it, or names what is wrong)."""
    header = _jpeg_header(data)
    if header is None or (channels == 1 and header[2] != "Gray"):  # PIL's colour-to-gray formula differs
        return None
    import simplejpeg

    try:
        pixels = simplejpeg.decode_jpeg(
            data, "GRAY" if channels == 1 else "RGB", min_height=2 * size, min_width=2 * size, min_factor=2
        )
    except ValueError:
        return None
    if pixels.shape[:2] == (size, size):
        return pixels
    from PIL import Image

    return _resized(Image.fromarray(pixels[..., 0] if channels == 1 else pixels), size, channels)


def image_header(path: str, keep: int = 0) -> tuple[tuple[str, int] | None, bytes | None]:
    """The image's mode (PIL's) and shorter side from its header, reading its first `HEADER_BYTES` (a ranged request
    on gs://), and the whole file only when the header does not end there; None when unreadable (it is quarantined
    later, with the decoder's reason). With it, the file's bytes when that first read got the whole file and it is
    at most `keep` bytes (else None): such an image need not be read again to be decoded."""
    try:
        data = read_object(path, HEADER_BYTES)
    except Exception:
        return None, None
    whole = data if len(data) <= keep and len(data) < HEADER_BYTES else None
    try:
        header = _header(data, path)
        if header is None and len(data) == HEADER_BYTES:  # the header may go on past the bytes read
            header = _header(read_object(path), path)
        return header, whole
    except Exception:
        return None, whole


def _jpeg_header(data: bytes) -> tuple[int, int, str] | None:
    """A JPEG's height, width and colour space when libjpeg-turbo decodes it here (`JPEG_SPACES`), else None."""
    if data[:2] != b"\xff\xd8":
        return None
    import simplejpeg

    try:
        height, width, space, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    return (height, width, space) if space in JPEG_SPACES else None


def _header(data: bytes, path: str) -> tuple[str, int] | None:
    jpeg = _jpeg_header(data)
    if jpeg is not None:
        return JPEG_SPACES[jpeg[2]], min(jpeg[:2])
    from PIL import Image

    try:
        with Image.open(_FileBytes(data, path)) as img:
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
    found: list[str] = []
    for dirpath, _, names in os.walk(root):
        folder = os.path.relpath(dirpath, root)
        found += names if folder == "." else [os.path.join(folder, name) for name in names]
    return sorted(found)


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
