# Two entry points for a fresh machine: `make run` and `make test`. Each creates .venv when missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
UV_VERSION := 0.13.8
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2
export PYTHONUNBUFFERED := 1
# The project's modules and the tests (pytest's rewritten modules) are compiled once and cached in __pycache__, even
# where PYTHONDONTWRITEBYTECODE is set (CI, containers): each of the suite's hundreds of processes would compile them
# again (a test worker's collection: about a third of its time).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: install run lint test test-fast test-images bench images lock clean

# Bytecode is compiled at install (--compile-bytecode): uv does not compile by default, and where
# PYTHONDONTWRITEBYTECODE is set (CI, containers) Python never caches it, so each of a run's ~12 processes (steps,
# trials, workers, server) would compile TensorFlow's Python again (about 3x its import time).
$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv==$(UV_VERSION)
	$(VENV)/bin/uv pip sync --quiet --compile-bytecode --python $(PY) requirements.lock
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) --no-deps -e .
	touch $@

install: $(VENV)/.installed

run: $(VENV)/.installed
	$(PY) -m pipelines run $(ARGS)

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

# The tier without end-to-end tests, on every CPU (pytest-xdist: each worker with its own temporary folders, ports
# and state); `make test` then runs the end-to-end tier (`e2e`: whole pipeline runs, multi-process training) the same
# way, a module's tests in one worker (`--dist loadfile`: one series of runs is a module fixture).
test-fast: lint
	$(PY) -m pytest -n auto -m "not e2e" $(PYTEST_ARGS)

test: test-fast
	$(PY) -m pytest -n auto --dist loadfile -m e2e $(PYTEST_ARGS)

# Every result file of bench/results/, one benchmark after the other (each records the commit, the machine, the
# command and the load average), then docs/benchmarks.md generated from them and from each benchmark's docstring
# (bench/page/). The page is generated before the test suite's run too, which checks that it is up to date, and
# again after it, with the suite's own result. The suite's run is the longest; run nothing else meanwhile.
bench: $(VENV)/.installed
	$(PY) -m bench.input_pipeline
	$(PY) -m bench.image_size
	$(PY) -m bench.make_run
	$(PY) -m bench.tflite
	$(PY) -m bench.tflite --image-size 32 --output bench/results/tflite_32px.json
	$(PY) -m bench.tuning
	$(PY) -m bench.batch_predict
	$(PY) -m bench.serving
	$(PY) -m bench.prep_scale
	$(PY) -m bench.remote_reads
	$(PY) -m bench.rehearse
	$(PY) -m bench.page
	$(PY) -m bench.test_suite
	$(PY) -m bench.page

# The images, built with podman on a locally made base image (no Docker engine, no registry): IMAGES="serving" builds
# one, IMAGES="trainer-gpu" the GPU trainer image.
images:
	bash containers/images.sh $(IMAGES)

# Each image run the way Vertex AI and Kubeflow run it (tests/images; podman, as root): after `make images`.
test-images: $(VENV)/.installed
	$(PY) -m pytest --images tests/images $(PYTEST_ARGS)

# Each image's lock, at requirements.lock's versions (-c): requirements-components.lock (pyproject.toml's
# dependencies, no test or bench tools), requirements-trainer.lock and requirements-serving.lock (what the trainer and
# the server import, containers/*.requirements.in), requirements-gpu.lock and requirements-serving-gpu.lock (the
# trainer's and the server's plus the CUDA libraries of tensorflow[and-cuda], for the images' platform whatever machine
# compiles it).
lock:
	$(PY) -m uv pip compile pyproject.toml --extra test --extra bench --python-version 3.11 -o requirements.lock
	$(PY) -m uv pip compile pyproject.toml -c requirements.lock --python-version 3.11 -o requirements-components.lock
	$(PY) -m uv pip compile containers/trainer.requirements.in -c requirements.lock --python-version 3.11 \
	    -o requirements-trainer.lock
	$(PY) -m uv pip compile containers/trainer-gpu.requirements.in -c requirements-trainer.lock --python-version 3.11 \
	    --python-platform x86_64-manylinux_2_28 -o requirements-gpu.lock
	$(PY) -m uv pip compile containers/serving.requirements.in -c requirements.lock --python-version 3.11 \
	    -o requirements-serving.lock
	$(PY) -m uv pip compile containers/serving-gpu.requirements.in -c requirements-serving.lock --python-version 3.11 \
	    --python-platform x86_64-manylinux_2_28 -o requirements-serving-gpu.lock

clean:
	rm -rf $(VENV) runs .pytest_cache
