"""The GPU images (`IMAGES="trainer-gpu serving-gpu" make images`; not built by default: about 7 GB each), each tested
when it is built: its entry points' modules import, TensorFlow is its CUDA build, and every CUDA library the lock
installs loads, but for those that need the NVIDIA driver's libcuda.so.1, which GPU nodes mount from the host. No GPU
here: training and serving themselves are the CPU images' tests (the same code and versions)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.imports import ENTRY_MODULES, external_modules, module_name, needed_files
from tests.helpers.podman import failed_imports, image, missing_images, run

GPU_IMAGES = {"trainer-gpu": "trainer.Dockerfile", "serving-gpu": "serving.Dockerfile"}  # image -> its Dockerfile


def built(name: str):
    return pytest.param(
        name,
        marks=pytest.mark.skipif(
            bool(missing_images([name])), reason=f"{image(name)} not built (IMAGES={name} make images)"
        ),
    )


each_gpu_image = pytest.mark.parametrize("name", [built(name) for name in GPU_IMAGES])

CUDA_CHECK = """
import ctypes, glob, json, os
import nvidia, tensorflow as tf
info = tf.sysconfig.get_build_info()
libraries = sorted(glob.glob(os.path.join(nvidia.__path__[0], "*", "lib", "lib*.so*")))
failed = {}
for path in libraries:
    try:
        ctypes.CDLL(path)
    except OSError as e:
        failed[os.path.basename(path)] = str(e)
print(json.dumps({"cuda": info.get("is_cuda_build"), "cudnn": info.get("cudnn_version"), "libraries": len(libraries),
                  "failed": failed}))
"""


@each_gpu_image
def test_the_entry_points_modules_import_in_the_gpu_image(name):
    files = needed_files(ENTRY_MODULES[GPU_IMAGES[name]])
    modules = sorted({module_name(f) for f in files} | external_modules(files))
    assert failed_imports(name, modules) == {}


@each_gpu_image
def test_tensorflow_is_the_cuda_build_and_its_libraries_load_without_a_gpu(name):
    code, out = run(image(name), ["-c", CUDA_CHECK], entrypoint=["python"])
    assert code == 0, out
    found = json.loads(out.strip().splitlines()[-1])
    assert found["cuda"] is True
    assert found["cudnn"]
    assert found["libraries"] >= 20  # cuBLAS, cuDNN, cuFFT, cuSPARSE, cuSOLVER, NCCL, the CUDA runtime...
    # a library that links the driver itself waits for the host's libcuda.so.1; nothing else may be missing
    assert all("libcuda.so.1" in message for message in found["failed"].values()), found["failed"]
