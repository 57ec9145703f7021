# Components image: base image of the pipeline's lightweight KFP components (prepare_data, evaluate_model, ...), and
# the SDK container of data prep's Dataflow workers.
# Build from the repository root:  docker build -f containers/components.Dockerfile -t IMAGE .
# Its ENTRYPOINT is Beam's SDK harness launcher, which Dataflow's workers start; each component's compiled spec
# brings its own command (`python3 -m kfp.dsl.executor_main`), which replaces it.
# They are compiled with install_kfp_package=False, so nothing is pip-installed at run time (the user is not
# root): the kfp installed here comes from the same requirements.lock as the compiler's, hence the same version.
# The build stage is the same as trainer.Dockerfile's up to the lock's install:
# concurrent or later builds share those (large) layers; each image then installs only the packages it needs.

# Exact tag (Python 3.11 as pyproject.toml requires). To pin the digest too, pass
# --build-arg PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:<digest from your registry mirror>.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
# Beam's own SDK image for Python 3.11 at the lock's apache-beam version (tests/contract/repository/test_containers.py checks both): the
# source of /opt/apache/beam/boot. containers/images.sh passes a stand-in where this registry cannot be reached.
ARG BEAM_SDK_IMAGE=docker.io/apache/beam_python3.11_sdk:2.77.0

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
# requirements-components.lock: pyproject.toml's dependencies without the test and bench tools, at requirements.lock's
# versions.
ARG LOCK=requirements-components.lock
COPY ${LOCK} requirements.lock
RUN uv pip sync --python /opt/venv/bin/python requirements.lock
# setuptools comes from the lock (no build isolation: nothing unpinned is downloaded).
COPY pyproject.toml README.md ./
# The packages this image runs, and only those (tests/contract/repository/test_containers.py checks them against the imports).
COPY core/ core/
COPY trainer/ trainer/
COPY serving/ serving/
COPY components/ components/
COPY models/ models/
RUN uv pip install --python /opt/venv/bin/python --no-deps --no-build-isolation .

# ---- Beam's SDK harness launcher ----
FROM ${BEAM_SDK_IMAGE} AS beam

# ---- runtime: the environment only, no build tools, non-root ----
FROM ${PYTHON_IMAGE}
# python3 on PATH is the environment's (the components' command calls `python3`); Beam's launcher starts the SDK
# harness with it (RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT: not in a fresh virtual environment, which would not see
# /opt/venv's packages).
ENV PATH=/opt/venv/bin:$PATH \
    TF_USE_LEGACY_KERAS=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1
# /gcs, /minio, /s3: the KFP launcher's local artifact paths; on Vertex /gcs is mounted over the empty folder.
RUN useradd --create-home --uid 1000 --user-group components \
    && mkdir -p /gcs /minio /s3 && chown 1000:1000 /gcs /minio /s3
COPY --from=build /opt/venv /opt/venv
COPY --from=beam /opt/apache/beam /opt/apache/beam
ENTRYPOINT ["/opt/apache/beam/boot"]
# Numeric, so that Kubernetes runAsNonRoot can verify it.
USER 1000:1000
WORKDIR /home/components
