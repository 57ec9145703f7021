"""The model served: the digits SavedModel (trained, or reused from the work directory) and the time of a
one-example call to it without a server."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench import ROOT, train_digits
from bench.serving.configurations import ONE_THREAD


def prepare_model(workdir: Path, epochs: int) -> tuple[str, bool]:
    """Train the digits model into workdir (reused when workdir already holds it)."""

    model_dir = workdir / "job" / "model"
    if (model_dir / "saved_model.pb").exists() and (workdir / "data" / "stats.json").exists():
        return str(model_dir), True
    return train_digits(workdir, epochs), False


def model_call_ms(model_dir: str, images: np.ndarray, one_thread: bool, calls: int, warmup: int) -> float:
    """Mean ms of a one-example `serving_default` call in a fresh process (TensorFlow's pools are fixed when it
    starts), after `warmup` unmeasured calls."""
    code = (
        "import sys, time, numpy as np, tensorflow as tf\n"
        "f = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "x = [tf.constant(v[None]) for v in np.load(sys.argv[2])]\n"
        "n, w = int(sys.argv[3]), int(sys.argv[4])\n"
        "for k in range(w): f(image=x[k % len(x)])['class_id'].numpy()\n"
        "t = time.perf_counter()\n"
        "for k in range(n): f(image=x[k % len(x)])['class_id'].numpy()\n"
        "print((time.perf_counter() - t) / n * 1000)\n"
    )
    with tempfile.NamedTemporaryFile(suffix=".npy") as f:
        np.save(f.name, images)
        env = dict(os.environ, **(ONE_THREAD if one_thread else {}))
        done = subprocess.run(
            [sys.executable, "-c", code, model_dir, f.name, str(calls), str(warmup)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
    return round(float(done.stdout.strip().splitlines()[-1]), 4)
