# Serving image: the project's TF-Serving-compatible server under Vertex AI's custom-container contract, for the
# Model Registry's containerSpec (imageUri = this image, ports [8080]; Vertex sets AIP_STORAGE_URI to the model's
# artifact directory and AIP_HTTP_PORT/AIP_HEALTH_ROUTE/AIP_PREDICT_ROUTE). See serving/vertex_container.py.
# Build from the repository root:  docker build -f containers/serving.Dockerfile -t IMAGE .
# Same requirements.lock as the trainer image, hence the same TensorFlow that trained and exported the model.
# The build stage installs requirements-serving.lock: only the packages the server imports, at requirements.lock's
# versions (containers/serving.requirements.in; `make lock`), so the image holds TensorFlow but not the pipeline's
# tools (kfp, GCPC, aiplatform, jax, the test tools).
# GPU serving image (deployments with platform.serving_accelerator_type), the same versions plus TensorFlow's CUDA
# libraries:  docker build -f containers/serving.Dockerfile --build-arg LOCK=requirements-serving-gpu.lock -t IMAGE .

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
# requirements-serving.lock, or requirements-serving-gpu.lock (the GPU serving image).
ARG LOCK=requirements-serving.lock
COPY ${LOCK} requirements.lock
RUN uv pip sync --python /opt/venv/bin/python requirements.lock
# setuptools comes from the lock (no build isolation: nothing unpinned is downloaded).
COPY pyproject.toml README.md ./
# The packages this image runs, and only those (tests/contract/repository/test_containers.py checks them against the imports).
COPY core/ core/
COPY serving/ serving/
RUN uv pip install --python /opt/venv/bin/python --no-deps --no-build-isolation .

# ---- runtime: the environment only, no build tools, non-root ----
FROM ${PYTHON_IMAGE}
# LD_LIBRARY_PATH: where GPU nodes mount the host's driver libraries (libcuda.so.1); the CUDA runtime libraries come
# from the GPU lock's nvidia-* wheels. Nothing is there on CPU machines.
ENV PATH=/opt/venv/bin:$PATH \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64 \
    TF_USE_LEGACY_KERAS=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN useradd --create-home --uid 1000 --user-group serving
COPY --from=build /opt/venv /opt/venv
# Numeric, so that Kubernetes runAsNonRoot can verify it. The entry point copies the model under /tmp.
USER 1000:1000
WORKDIR /home/serving
# Vertex's default AIP_HTTP_PORT, and the entry point's when it is unset.
EXPOSE 8080
ENTRYPOINT ["python", "-m", "serving.vertex_container"]
