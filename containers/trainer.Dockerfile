# Trainer image: `python -m trainer.task` for Vertex AI custom jobs and tuning trials (worker pools 0 and 1).
# Build from the repository root:  docker build -f containers/trainer.Dockerfile -t IMAGE .
# It installs requirements-trainer.lock: the packages trainer/ and models/ import (containers/trainer.requirements.in)
# at requirements.lock's versions, the ones the tests ran with. That image is CPU only.
# GPU trainer image (worker pools with platform.accelerator_type), the same versions plus TensorFlow's CUDA libraries:
#   docker build -f containers/trainer.Dockerfile --build-arg LOCK=requirements-gpu.lock -t IMAGE .
# Your own networks (config trainer.model: models.MODULE:FUNCTION) come from models/, installed with the other
# packages (docs/guides/model.md); a builder in another package needs its folder copied and installed the same way.
# The build stage is the same as components.Dockerfile's up to the lock's install:
# concurrent or later builds share those (large) layers; each image then installs only the packages it needs.

# Exact tag (Python 3.11 as pyproject.toml requires). To pin the digest too, pass
# --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:<digest from your registry mirror>.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: a virtual environment with exactly the lock, then this package (no dependencies) ----
FROM ${PYTHON_IMAGE} AS build
ARG UV_VERSION=0.13.8
# UV_NO_CACHE=false with a cache folder mounted at /root/.cache/uv keeps the downloads between builds
# (containers/images.sh); the cache is never part of the image (the runtime stage copies the environment only).
ARG UV_NO_CACHE=true
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 UV_NO_CACHE=${UV_NO_CACHE} UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1
RUN pip install "uv==${UV_VERSION}" && python -m venv /opt/venv
WORKDIR /src
# The lock alone first, so that this (slow, large) layer is cached until the lock changes. LOCK:
# requirements-trainer.lock, or requirements-gpu.lock (the GPU trainer image): the same plus TensorFlow's CUDA
# libraries.
ARG LOCK=requirements-trainer.lock
COPY ${LOCK} requirements.lock
RUN uv pip sync --python /opt/venv/bin/python requirements.lock
# setuptools comes from the lock (no build isolation: nothing unpinned is downloaded).
COPY pyproject.toml README.md ./
# The packages this image runs, and only those (tests/contract/repository/test_containers.py checks them against the imports).
COPY core/ core/
COPY trainer/ trainer/
COPY models/ models/
RUN uv pip install --python /opt/venv/bin/python --no-deps --no-build-isolation .

# ---- runtime: the environment only, no build tools, non-root ----
FROM ${PYTHON_IMAGE}
# LD_LIBRARY_PATH: where GPU nodes (GKE's NVIDIA device plugin) mount the host's driver libraries (libcuda.so.1);
# the CUDA runtime libraries themselves come from the lock's nvidia-* wheels. Nothing is there on CPU machines.
ENV PATH=/opt/venv/bin:$PATH \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64 \
    TF_USE_LEGACY_KERAS=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# cloudml-hypertune (the chief reports a tuning trial's metric) writes /tmp/hypertune/output.metrics, where
# Vertex AI reads it; /tmp is writable by every user.
RUN useradd --create-home --uid 1000 --user-group trainer
COPY --from=build /opt/venv /opt/venv
# Numeric, so that Kubernetes runAsNonRoot can verify it.
USER 1000:1000
WORKDIR /home/trainer
ENTRYPOINT ["python", "-m", "trainer.task"]
