"""Static checks of containers/*.Dockerfile, .dockerignore and the locks they install (no Docker engine needed)."""

import importlib.metadata
import importlib.util
import json
import re
import shlex
from pathlib import Path

import kfp
import pytest
from dockerfile_parse import DockerfileParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers.imports import ENTRY_MODULES, PACKAGES, needed_files

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = sorted((ROOT / "containers").glob("*.Dockerfile"))
# Each image's own lock (its Dockerfile's default LOCK), the GPU images' (cloudbuild.yaml), and the lock of .venv and
# the tests, whose versions every other lock takes.
DEFAULT_LOCK = {
    "components.Dockerfile": "requirements-components.lock",
    "trainer.Dockerfile": "requirements-trainer.lock",
    "serving.Dockerfile": "requirements-serving.lock",
}
GPU_LOCK = {  # GPU lock -> (the CPU image's lock it extends, its requirements file)
    "requirements-gpu.lock": ("requirements-trainer.lock", "trainer-gpu.requirements.in"),
    "requirements-serving-gpu.lock": ("requirements-serving.lock", "serving-gpu.requirements.in"),
}
LOCKS = ["requirements.lock", *GPU_LOCK, *DEFAULT_LOCK.values()]


def parse(path: Path) -> DockerfileParser:
    return DockerfileParser(str(path))


def stages(parser: DockerfileParser) -> list[list[dict]]:
    """Instructions grouped by stage (from each FROM to the next), comments left out."""
    out: list[list[dict]] = []
    for item in parser.structure:
        if item["instruction"] == "FROM":
            out.append([])
        if out and item["instruction"] != "COMMENT":
            out[-1].append(item)
    return out


def with_args(parser: DockerfileParser, build_args: dict | None = None) -> list[dict]:
    """The instructions with `${NAME}`/`$NAME` of the ARGs declared before them replaced by their values: the
    given build args, else the defaults (per stage, as Docker scopes them; the global ARGs before the first FROM
    apply to FROM lines only)."""
    values, out = {}, []
    for item in parser.structure:
        if item["instruction"] == "FROM":
            values = {}
        if item["instruction"] == "ARG":
            name, _, default = item["value"].partition("=")
            values[name] = (build_args or {}).get(name, default)
            out.append(item)
            continue
        value = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m, known=values: known.get(m[1] or m[2], m[0]), item["value"])
        out.append({**item, "value": value})
    return out


def copy_sources(parser: DockerfileParser, build_args: dict | None = None) -> list[str]:
    """Build-context sources of every COPY/ADD (not those copied from another stage), build args resolved."""
    sources = []
    for item in with_args(parser, build_args):
        if item["instruction"] in ("COPY", "ADD") and "--from=" not in item["value"]:
            words = [w for w in item["value"].split() if not w.startswith("--")]
            sources += words[:-1]
    return sources


def dockerignore_rules(lines: list[str] | None = None) -> list[tuple[bool, re.Pattern]]:
    """(negated, regex) per .dockerignore line, with Docker's pattern syntax (`*`, `?`, `**`)."""
    rules = []
    for line in lines if lines is not None else (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated, pattern = line.startswith("!"), line.lstrip("!").strip("/")
        regex = "".join(
            {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
            for token in re.findall(r"\*\*/|\*\*|\*|\?|[^*?]+", pattern)
        )
        rules.append((negated, re.compile(regex)))
    return rules


def ignored(path: str, rules=None) -> bool:
    """Whether Docker leaves `path` out of the context: the last rule matching it or a parent folder wins."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    result = False
    for negated, regex in rules or dockerignore_rules():
        if any(regex.fullmatch(c) for c in candidates):
            result = not negated
    return result


def source_files(under: str) -> list[str]:
    """The files under a folder, bytecode caches left out (no git: Cloud Build's /workspace may have no .git)."""
    return [str(f.relative_to(ROOT)) for f in (ROOT / under).rglob("*") if f.is_file() and "__pycache__" not in f.parts]


def lock_pin(name: str) -> str:
    match = re.search(rf"^{re.escape(name)}==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M)
    assert match, f"{name} is not pinned in requirements.lock"
    return match.group(1)


def lock_pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$", text, re.M))
    assert len(pins) == len(re.findall(r"^[^#\s]", text, re.M)), f"{lock} has a line that is not NAME==VERSION"
    return {canonicalize_name(name): version for name, version in pins.items()}


def test_the_three_images_exist():
    assert {p.name for p in DOCKERFILES} == {"trainer.Dockerfile", "components.Dockerfile", "serving.Dockerfile"}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_pinned_python_311(path):
    parser = parse(path)
    stage_names = {m.group(1) for m in re.finditer(r"^FROM\s+\S+\s+AS\s+(\S+)", parser.content, re.M | re.I)}
    for image in parser.parent_images:
        if image in stage_names:
            continue
        name, _, digest = image.partition("@")
        tag = name.rpartition(":")[2] if ":" in name.rpartition("/")[2] else ""
        assert digest and re.fullmatch(r"sha256:[0-9a-f]{64}", digest) or re.match(r"\d+\.\d+\.\d+", tag), (
            f"{path.name}: base image {image} is not pinned to a version tag or digest"
        )
        assert tag != "latest"
        if name.startswith("python:"):
            assert tag.startswith("3.11."), f"pyproject.toml requires Python 3.11, {path.name} uses {image}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_multi_stage_non_root_runtime(path):
    all_stages = stages(parse(path))
    assert len(all_stages) >= 2, f"{path.name} is not multi-stage"
    runtime = all_stages[-1]
    assert any(i["instruction"] == "COPY" and "--from=" in i["value"] for i in runtime), "runtime copies nothing"
    users = [i["value"].split(":")[0] for i in runtime if i["instruction"] == "USER"]
    assert users, f"{path.name}: no USER in the final stage (runs as root)"
    assert users[-1] not in ("0", "root"), f"{path.name}: final USER is root"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_installs_exactly_the_lock_then_the_package_without_deps(path):
    build = stages(parse(path))[0]
    runs = [i["value"] for i in build if i["instruction"] == "RUN"]
    for lock in LOCKS:  # each lock arrives as requirements.lock, which the RUN below installs
        copies = [i["value"] for i in with_args(parse(path), {"LOCK": lock}) if i["instruction"] == "COPY"]
        assert f"{lock} requirements.lock" in copies, f"{path.name} with LOCK={lock} does not install {lock}"
    assert copy_sources(parse(path))[0] == DEFAULT_LOCK[path.name]  # the image's own lock
    assert any(
        re.search(r"uv pip sync .*requirements\.lock|pip install .*--no-deps .*-r requirements\.lock", r) for r in runs
    ), f"{path.name} does not install requirements.lock"
    assert any(re.search(r"pip install .*--no-deps.* \.$", r) for r in runs), "package not installed with --no-deps"
    make_uv = re.search(r"^UV_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert f"UV_VERSION={make_uv}" in parse(path).content, "uv differs from the Makefile's (which made .venv)"


def test_bytecode_is_compiled_at_install():
    """Every image and the Makefile's .venv compile bytecode when installing: uv does not by default, and with
    PYTHONDONTWRITEBYTECODE (the images set it) each of a run's processes would compile TensorFlow's Python again."""
    for path in DOCKERFILES:
        build = stages(parse(path))[0]
        envs = " ".join(i["value"] for i in build if i["instruction"] == "ENV")
        assert "UV_COMPILE_BYTECODE=1" in envs.split(), f"{path.name}: the build stage does not compile bytecode"
    recipe = re.search(r"^\$\(VENV\)/\.installed:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    installs = [line for line in recipe.splitlines() if re.search(r"uv pip (sync|install)", line)]
    assert len(installs) == 2 and all("--compile-bytecode" in line for line in installs), installs


def test_make_test_runs_the_linters_first():
    """`make test` (what CI runs) depends on `make lint`: ruff's checks, ruff's format check, mypy and the layer
    contracts (import-linter)."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: test-fast$", makefile, re.M) and re.search(r"^test-fast: lint$", makefile, re.M)
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert [line.strip() for line in recipe.splitlines()] == [
        "$(PY) -m ruff check .",
        "$(PY) -m ruff format --check .",
        "$(PY) -m mypy",
        "$(VENV)/bin/lint-imports --no-cache",
    ]


def test_the_test_benchmark_runs_the_tiers_as_make_test_does():
    """`make test-fast` is the fast tier of bench.test_suite and `make test` adds its e2e tier, with the same pytest
    arguments."""
    from bench.test_suite import TIERS

    makefile = (ROOT / "Makefile").read_text()
    recipes = {
        target: re.search(rf"^{target}:.*\n\t\$\(PY\) -m pytest (.*) \$\(PYTEST_ARGS\)$", makefile, re.M).group(1)
        for target in ("test-fast", "test")
    }
    assert {target: shlex.split(recipe) for target, recipe in recipes.items()} == {
        "test-fast": TIERS["fast"],
        "test": TIERS["e2e"],
    }
    assert set(TIERS) == {"fast", "e2e"}


def test_build_stages_share_the_lock_install():
    """Same instructions up to the lock's install: the images differ only in their lock."""

    def through_the_lock(path):
        build = [(i["instruction"], i["value"]) for i in stages(parse(path))[0]]
        end = next(n for n, (instruction, value) in enumerate(build) if "uv pip sync" in value)
        default = f"LOCK={DEFAULT_LOCK[path.name]}"
        return json.dumps([(k, v.replace(default, "LOCK=requirements.lock")) for k, v in build[: end + 1]])

    assert len({through_the_lock(p) for p in DOCKERFILES}) == 1


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_each_image_ships_the_packages_it_runs_and_no_other(path):
    """Every first-party module the image's entry modules reach is copied, and every copied package holds one."""
    needed = {str(f.relative_to(ROOT)) for f in needed_files(ENTRY_MODULES[path.name])}
    packages = [source.rstrip("/") for source in copy_sources(parse(path)) if source.split("/")[0] in PACKAGES]
    assert sorted(f for f in needed if not any(within(f, p) for p in packages)) == []
    assert [p for p in packages if not any(within(f, p) for f in needed)] == []


def within(file: str, source: str) -> bool:
    return file == source or file.startswith(source + "/")


def test_trainer_entrypoint_and_legacy_keras():
    parser = parse(ROOT / "containers" / "trainer.Dockerfile")
    entrypoints = [i["value"] for i in stages(parser)[-1] if i["instruction"] == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["python", "-m", "trainer.task"]
    assert parser.envs["TF_USE_LEGACY_KERAS"] == "1"
    assert lock_pin("tf-keras") == lock_pin("tensorflow")


def test_components_image_has_the_compilers_kfp():
    """Components are compiled with install_kfp_package=False: the image's kfp must be the compiler's."""
    assert lock_pin("kfp") == kfp.__version__ == lock_pins("requirements-components.lock")["kfp"]
    parser = parse(ROOT / "containers" / "components.Dockerfile")
    assert "requirements-components.lock" in copy_sources(parser)


def test_components_image_starts_beams_sdk_harness_for_dataflow():
    """Dataflow's workers start the image's /opt/apache/beam/boot (Beam's launcher, from Beam's SDK image for the
    image's Python at the lock's apache-beam version), which runs the SDK harness with the environment's Python."""
    parser = parse(ROOT / "containers" / "components.Dockerfile")
    [beam_image] = re.findall(r"^ARG BEAM_SDK_IMAGE=(\S+)$", parser.content, re.M)
    assert (
        beam_image == f"docker.io/apache/beam_python3.11_sdk:{lock_pins('requirements-components.lock')['apache-beam']}"
    )
    assert re.search(r"^FROM \$\{BEAM_SDK_IMAGE\} AS beam$", parser.content, re.M)
    runtime = stages(parser)[-1]
    copies = [i["value"] for i in runtime if i["instruction"] == "COPY"]
    assert "--from=beam /opt/apache/beam /opt/apache/beam" in copies
    [entrypoint] = [i["value"] for i in runtime if i["instruction"] == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["/opt/apache/beam/boot"]  # the components' command replaces it
    assert parser.envs["RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT"] == "1"  # else boot makes a venv without /opt/venv
    assert parser.envs["PATH"].startswith("/opt/venv/bin:")  # the `python` boot runs


def test_serving_entrypoint_port_and_lock():
    """The Vertex prediction container: its entry point module, Vertex's default port, the trainer's TensorFlow."""
    from serving import vertex_container

    parser = parse(ROOT / "containers" / "serving.Dockerfile")
    runtime = stages(parser)[-1]
    entrypoint = json.loads([i["value"] for i in runtime if i["instruction"] == "ENTRYPOINT"][-1])
    assert entrypoint == ["python", "-m", "serving.vertex_container"]
    assert importlib.util.find_spec(entrypoint[2]) is not None
    assert [i["value"] for i in runtime if i["instruction"] == "EXPOSE"] == [str(vertex_container.DEFAULT_PORT)]
    assert vertex_container.DEFAULT_PORT == 8080
    assert parser.envs["TF_USE_LEGACY_KERAS"] == "1" and parser.envs["PYTHONDONTWRITEBYTECODE"] == "1"


@pytest.mark.parametrize("gpu_lock", GPU_LOCK)
def test_gpu_locks_are_the_cpu_images_plus_tensorflows_cuda_libraries(gpu_lock):
    """The GPU trainer trains, and the GPU server serves, with exactly the CPU image's (and the tests') versions:
    same pins for every package of its lock; the only additions are what tensorflow[and-cuda] requires, within its
    bounds."""
    cpu_lock, requirements = GPU_LOCK[gpu_lock]
    cpu, gpu = lock_pins(cpu_lock), lock_pins(gpu_lock)
    assert {name: gpu.get(name) for name in cpu} == cpu
    cuda = [
        Requirement(r)
        for r in importlib.metadata.requires("tensorflow")
        if Requirement(r).marker
        and Requirement(r).marker.evaluate({"extra": "and-cuda"})
        and not Requirement(r).marker.evaluate({"extra": ""})
    ]
    assert {canonicalize_name(r.name) for r in cuda} == set(gpu) - set(cpu)
    assert len(cuda) >= 10 and "nvidia-cudnn-cu12" in gpu
    for requirement in cuda:
        assert requirement.specifier.contains(gpu[canonicalize_name(requirement.name)]), requirement
    assert cpu["tensorflow"] == gpu["tensorflow"] == importlib.metadata.version("tensorflow")
    assert "tensorflow[and-cuda]" in (ROOT / "containers" / requirements).read_text()


@pytest.mark.parametrize("lock", DEFAULT_LOCK.values())
def test_each_images_lock_is_a_subset_of_requirements_lock_at_its_versions(lock):
    """Every image runs the versions the tests ran with (the serving image the TensorFlow that exported the model),
    and none of the test and bench tools; trainer and serving none of the pipeline's either."""
    full, image = lock_pins("requirements.lock"), lock_pins(lock)
    assert {name: full.get(name) for name in image} == image
    assert "tensorflow" in image and not {"pytest", "ruff", "mypy", "kserve", "gcp-storage-emulator"} & set(image)
    if lock != "requirements-components.lock":
        assert not {"kfp", "google-cloud-pipeline-components", "google-cloud-aiplatform", "jax"} & set(image)
    assert {"kfp", "google-cloud-pipeline-components", "google-vizier"} <= set(
        lock_pins("requirements-components.lock")
    )
    assert {"tf-keras", "cloudml-hypertune", "tensorboard"} <= set(lock_pins("requirements-trainer.lock"))
    assert {"tensorflow-serving-api", "starlette", "uvicorn", "google-cloud-storage"} <= set(
        lock_pins("requirements-serving.lock")
    )


def test_locks_are_what_make_lock_compiles():
    """Each lock's header (uv's record of the command) is the Makefile's `lock` recipe for it."""
    recipe = re.search(r"^lock:\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    commands = [" ".join(c.replace("$(PY) -m ", "").split()) for c in recipe.replace("\\\n", " ").splitlines()]
    for lock in LOCKS:
        header = re.search(r"^#    (uv pip compile .*)$", (ROOT / lock).read_text(), re.M).group(1)
        assert header in commands, f"{lock} was not compiled by `make lock`: {header}"
    assert len(commands) == len(LOCKS)


@pytest.mark.parametrize("lock", LOCKS)
@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_exist_and_reach_the_context(path, lock):
    rules = dockerignore_rules()
    for source in copy_sources(parse(path), {"LOCK": lock}):
        assert (ROOT / source).exists(), f"{path.name} copies {source}, which is not in the repository"
        files = source_files(source) if (ROOT / source).is_dir() else [source]
        assert files, f"{source} holds no files"
        left_out = [f for f in files if ignored(f, rules)]
        assert not left_out, f".dockerignore leaves out files {path.name} needs: {left_out[:5]}"


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        "runs/20250101-000000/summary.json",
        "runs/model_repository/tfpipe-model/1/saved_model.pb",
        "build/training.yaml",
        "tests/unit/pipelines/test_cli.py",
        "bench/results/tflite.json",
        ".pytest_cache/v/cache",
        ".ruff_cache/x",
        "tfpipe.egg-info/PKG-INFO",
        "components/x.pyc",
        "trainer/__pycache__/task.cpython-311.pyc",
        "serving/__pycache__/rest.cpython-311.pyc",
        "pipelines/cli/local.py",
        "cloudbuild.yaml",
        "containers/trainer.Dockerfile",
        "containers/serving.Dockerfile",
        "Makefile",
        ".env",
    ],
)
def test_dockerignore_leaves_out(path):
    assert ignored(path)


def test_dockerignore_matcher_follows_docker_semantics():
    rules = dockerignore_rules(["# comment", "*", "!pkg", "**/__pycache__", "pkg/data/*.tmp", "!pkg/data/keep?.tmp"])
    assert ignored("other/file.py", rules) and ignored(".hidden", rules)
    assert not ignored("pkg/sub/file.py", rules)
    assert ignored("pkg/sub/__pycache__/file.pyc", rules) and ignored("pkg/__pycache__", rules)
    assert ignored("pkg/data/a.tmp", rules) and not ignored("pkg/data/keep1.tmp", rules)
    assert not ignored("pkg/data/sub/a.tmp", rules)
