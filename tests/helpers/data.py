"""Data sets as users bring them, made in a test's folder: image folders of learnable patterns, drawn shapes, and
scikit-learn's iris and wine as CSV files."""

import csv

import numpy as np
from PIL import Image


def write_images(root, classes=("cats", "dogs"), per_class=12, size=(20, 16), mode="RGB", fmt="PNG", seed=0):
    """An image folder (one sub-folder per class) with simple, learnable class patterns."""
    rng = np.random.default_rng(seed)
    for c, name in enumerate(classes):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            base = np.full((size[1], size[0], 3), 40 + 180 * (c % 2), np.uint8)
            noisy = np.clip(base + rng.integers(-30, 30, base.shape), 0, 255).astype(np.uint8)
            img = Image.fromarray(noisy, "RGB").convert(mode)
            img.save(folder / f"{name}_{i:03d}.{fmt.lower().replace('jpeg', 'jpg')}", fmt)
    return root


def write_shapes(root, per_class=150, size=40, seed=0):
    """An image folder of simple drawn shapes (circle, square, triangle; random place, size and colours) of
    size×size px PNGs, `per_class` each."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    for name in ("circle", "square", "triangle"):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            background = tuple(int(v) for v in rng.integers(0, 100, 3))
            img = Image.new("RGB", (size, size), background)
            r = rng.uniform(0.2, 0.4) * size
            cx, cy = rng.uniform(r, size - r, 2)
            fill = tuple(int(v) for v in rng.integers(150, 256, 3))
            draw = ImageDraw.Draw(img)
            if name == "circle":
                draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
            elif name == "square":
                draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
            else:
                draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
            img.save(root / name / f"{name}_{i:03d}.png")
    return root


IRIS_FEATURES = ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"]


def iris_csv(path, columns) -> tuple[str, np.ndarray]:
    """scikit-learn's iris as a user's CSV with `columns` (feature names, `label`, `id`) in that order; returns the
    path and the feature matrix in the model's column order."""
    from sklearn.datasets import load_iris

    bunch = load_iris()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for i, (row, target) in enumerate(zip(bunch.data, bunch.target)):
            values = {**dict(zip(IRIS_FEATURES, row)), "label": bunch.target_names[target], "id": f"r{i}"}
            writer.writerow([values[c] for c in columns])
    return str(path), bunch.data.astype(np.float32)


def wine_csv(path, bad_row: int = 5):
    """scikit-learn's wine data as a user's CSV: 178 rows, 13 named feature columns, a `label` column and one
    unreadable value."""
    import csv

    from sklearn.datasets import load_wine

    bunch = load_wine()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*bunch.feature_names, "label"])
        for i, (row, target) in enumerate(zip(bunch.data, bunch.target)):
            writer.writerow(["oops" if i == bad_row else row[0], *row[1:], int(target)])
    return path
