import numpy as np
import pytest
from PIL import Image

from components.lib.prep.pipeline import ShapeOf, header_summary
from components.lib.prep.source_reads import list_folder, read_images, write_listing
from components.lib.prep.sources import SMALL_IMAGE_BYTES, BadRecord, image_header, load_image


@pytest.fixture
def images(tmp_path):
    """Images of every kind prep meets: JPEG and PNG, grayscale, palette, alpha, sizes that need a resize or not,
    and unreadable files (truncated, not an image, missing)."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)
    rgb = Image.fromarray(pixels)
    paths = {}
    for name, img, fmt in [
        ("rgb.jpg", rgb, "JPEG"),
        ("gray.jpg", rgb.convert("L"), "JPEG"),
        ("square.jpg", rgb.crop((0, 0, 24, 24)), "JPEG"),
        ("rgba.png", rgb.convert("RGBA"), "PNG"),
        ("palette.png", rgb.convert("P"), "PNG"),
        ("cmyk.jpg", rgb.convert("CMYK"), "JPEG"),
    ]:
        paths[name] = tmp_path / name
        img.save(paths[name], fmt)
    paths["truncated.jpg"] = tmp_path / "truncated.jpg"
    paths["truncated.jpg"].write_bytes(paths["rgb.jpg"].read_bytes()[:400])
    paths["text.jpg"] = tmp_path / "text.jpg"
    paths["text.jpg"].write_bytes(b"not an image")
    paths["missing.jpg"] = tmp_path / "missing.jpg"
    return {name: str(path) for name, path in paths.items()}


def _outcome(load, *args):
    try:
        return load(*args).tobytes()
    except BadRecord as e:
        return str(e)


def _through_the_file(path, size, channels):
    """The pixels PIL gives reading the file itself and always resizing: what the in-memory reads must equal."""
    with Image.open(path) as img:
        return img.convert("L" if channels == 1 else "RGB").resize((size, size), Image.Resampling.BILINEAR).tobytes()


def test_images_read_in_one_go_are_what_pil_gives_through_the_file(images):
    headers = {
        "rgb.jpg": ("RGB", 30),
        "gray.jpg": ("L", 30),
        "square.jpg": ("RGB", 24),
        "rgba.png": ("RGBA", 30),
        "palette.png": ("P", 30),
        "cmyk.jpg": ("CMYK", 30),
        "truncated.jpg": None,
        "text.jpg": None,
        "missing.jpg": None,
    }
    reasons = {  # the file's own reason, naming its path
        "truncated.jpg": "unreadable image: Truncated File Read",
        "text.jpg": f"unreadable image: cannot identify image file {images['text.jpg']!r}",
        "missing.jpg": f"unreadable image: [Errno 2] No such file or directory: {images['missing.jpg']!r}",
    }
    assert headers.keys() == images.keys()
    for name, path in images.items():
        assert image_header(path) == (headers[name], None), name
        header, kept = image_header(path, keep=SMALL_IMAGE_BYTES)
        assert header == headers[name], name
        assert kept == (None if name == "missing.jpg" else open(path, "rb").read()), name  # small files: their bytes
        for size, channels in [(24, 3), (24, 1), (16, 3)]:  # square.jpg at 24: no resize
            expected = reasons[name] if name in reasons else _through_the_file(path, size, channels)
            assert _outcome(load_image, path, size, channels) == expected, (name, size, channels)
            if kept is not None:  # decoded from the bytes kept: the same pixels, the same reasons
                assert _outcome(load_image, path, size, channels, kept) == expected, (name, size, channels)


def test_image_work_items_and_header_summaries(tmp_path):
    for rel in ["b/2.png", "a/1.jpg", "a/notes.txt", "top.jpg"]:
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    assert list_folder(str(tmp_path)) == ["a/1.jpg", "a/notes.txt", "b/2.png", "top.jpg"]
    files = ["a/1.jpg", "a/notes.txt", "a/line\nbreak é.png", "b/2.png", "b/3.png"]
    items = write_listing(str(tmp_path), files, str(tmp_path / "tmp" / "listing.jsonl"), per_item=2)
    assert [(i.first, i.end - i.start > 0) for i in items] == [(0, True), (2, True), (4, True)]
    records = [r for item in items for r in read_images(item)]
    assert [r[:3] for r in records] == [(rel, rel[0], (i,)) for i, rel in enumerate(files)]
    assert records[0][3] == f"{tmp_path}/a/1.jpg" and records[2][3] == f"{tmp_path}/a/line\nbreak é.png"
    assert str(records[1][3]) == "not a PNG or JPEG file"

    summaries = [header_summary([("RGB", 30), None]), header_summary([None]), header_summary([("L", 24), ("RGB", 40)])]
    assert summaries[1] == (frozenset(), {})
    combine = ShapeOf()
    acc = combine.merge_accumulators([combine.add_input(combine.create_accumulator(), s) for s in summaries])
    assert combine.extract_output(acc) == (frozenset({"RGB", "L"}), {30: 1, 24: 1, 40: 1})


def _jpeg(path, pixels, **options):
    Image.fromarray(pixels).save(path, "JPEG", **options)
    return str(path)


def test_a_header_past_the_first_bytes_is_read_from_the_whole_file(tmp_path, gcs_emulator):
    """A JPEG whose colour profile pushes its frame header past `HEADER_BYTES` (Pillow splits a profile into
    several segments): its header is still found, locally and on gs://, where the first bytes are one ranged
    request."""
    from components.lib.prep.sources import HEADER_BYTES
    from core.storage import read_object

    rng = np.random.default_rng(1)
    path = _jpeg(
        tmp_path / "profiled.jpg", rng.integers(0, 256, (30, 50, 3), dtype=np.uint8), icc_profile=b"p" * 150_000
    )
    data = open(path, "rb").read()
    assert data.index(b"\xff\xc0") > HEADER_BYTES  # the frame header (SOF0) lies past the first bytes
    gcs_emulator.blob("profiled.jpg").upload_from_filename(path)
    uri = "gs://test-bucket/profiled.jpg"
    assert read_object(uri, 100) == data[:100] and read_object(uri) == data
    for where in (uri, path):  # from a byte: the next bytes, or the rest
        assert read_object(where, 100, 50) == data[50:150] and read_object(where, -1, 100) == data[100:]
    assert image_header(path, SMALL_IMAGE_BYTES) == image_header(uri, SMALL_IMAGE_BYTES) == (("RGB", 30), None)
    assert load_image(uri, 16, 3).tobytes() == _through_the_file(path, 16, 3)


def test_a_large_jpeg_is_decoded_at_a_reduced_scale_close_to_a_full_decode(tmp_path, monkeypatch):
    """Both sides 4× the size or more: libjpeg-turbo decodes at a DCT scale keeping them at least twice the size,
    then the bilinear resize; the pixels stay within a few levels of a full decode's. Smaller images, and targets
    that need colour-to-gray, are decoded whole (the pixels PIL gives)."""
    import simplejpeg

    shapes = []
    decode = simplejpeg.decode_jpeg

    def recorded(*args, **kwargs):
        pixels = decode(*args, **kwargs)
        shapes.append(pixels.shape)
        return pixels

    monkeypatch.setattr(simplejpeg, "decode_jpeg", recorded)
    y, x = np.mgrid[0:400, 0:320]
    smooth = np.stack([(x * 0.7) % 256, (y * 0.5) % 256, (x + y) * 0.3 % 256], axis=-1).astype(np.uint8)
    path = _jpeg(tmp_path / "photo.jpg", smooth, quality=95)
    reduced = load_image(path, 40, 3)
    assert shapes == [(100, 80, 3)]  # 1/4 scale: both sides still ≥ 80
    full = np.frombuffer(_through_the_file(path, 40, 3), np.uint8).reshape(40, 40, 3)
    assert np.abs(reduced.astype(int) - full).mean() < 2.0
    assert load_image(path, 100, 3).tobytes() == _through_the_file(path, 100, 3)  # 320 < 4 × 100: whole
    assert shapes[-1] == (400, 320, 3)
