"""cloudbuild.yaml: the step graph, the substitutions, and its steps' own commands run here (docker faked, the
compile steps for real, publish/submit/schedule parsed by the real CLI without calling Google Cloud)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
TEXT = (ROOT / "cloudbuild.yaml").read_text()
BUILD = yaml.safe_load(TEXT)
STEPS = {step["id"]: step for step in BUILD["steps"]}
BUILTINS = {"PROJECT_ID": "acme-ml-prod", "SHORT_SHA": "abc1234", "COMMIT_SHA": "abc1234" + "5" * 33}
VALUES = {**BUILD["substitutions"], **BUILTINS}
REGISTRY = "https://europe-west4-kfp.pkg.dev/acme-ml-prod/tfpipe-templates"
WAIT_FOR = {
    "check-build": None,  # the first step
    "test": ["check-build"],
    "build-trainer": ["test"],
    "build-components": ["test"],
    "build-serving": ["test"],
    "build-trainer-gpu": ["test"],
    "build-serving-gpu": ["test"],
    "push-trainer": ["build-trainer"],
    "push-components": ["build-components"],
    "push-serving": ["build-serving"],
    "push-trainer-gpu": ["build-trainer-gpu"],
    "push-serving-gpu": ["build-serving-gpu"],
    "compile-training": ["push-trainer", "push-components", "push-serving", "push-trainer-gpu", "push-serving-gpu"],
    "compile-batch-prediction": ["push-trainer", "push-components"],
    "publish": ["compile-training", "compile-batch-prediction"],
    "submit-run": ["publish"],
    "update-schedule": ["publish"],
}
# image -> (Dockerfile, build args): the GPU images are the CPU ones' Dockerfiles with their GPU locks.
IMAGES = {
    "trainer": ("containers/trainer.Dockerfile", []),
    "components": ("containers/components.Dockerfile", []),
    "serving": ("containers/serving.Dockerfile", []),
    "trainer-gpu": ("containers/trainer.Dockerfile", ["--build-arg", "LOCK=requirements-gpu.lock"]),
    "serving-gpu": ("containers/serving.Dockerfile", ["--build-arg", "LOCK=requirements-serving-gpu.lock"]),
}
# platform fields of the training template's images, set by compile-training from build/<image>.image
TRAINING_IMAGES = {
    "trainer": "trainer_image",
    "components": "components_image",
    "serving": "serving_image",
    "trainer-gpu": "trainer_gpu_image",
    "serving-gpu": "serving_gpu_image",
}
# A user's config as the trigger would find it at _CONFIG: the prod profile is what CI compiles and runs with.
CONFIG = """\
parameters: {epochs: 15}
profiles:
  prod:
    parameters: {epochs: 40, workers: 3}
    platform:
      pipeline_root: gs://prod-bucket/pipeline-root
      machine_type: n1-standard-8
      trainer_image: example.com/stale/trainer:old
      serving_image: example.com/stale/serving:old
"""
FAKE_DOCKER = """#!/bin/sh
echo "$*" >> "$DOCKER_LOG"
if [ "$1 $2" = "image inspect" ]; then
  for ref; do :; done
  printf '%s@sha256:%s\\n' "${ref%:*}" "$(printf %s "$ref" | sha256sum | cut -c1-64)"
fi
"""
# Stands in for .venv/bin/python: parses `-m pipelines COMMAND ...` with the real CLI and logs the options;
# the command itself (and with it every Google Cloud call) does not run.
PARSE_CLI = """import json, os, sys
import click
from pipelines.cli import cli
assert sys.argv[1:3] == ["-m", "pipelines"], sys.argv
name, *args = sys.argv[3:]
try:
    ctx = cli.commands[name].make_context(name, args)
except click.ClickException as e:
    e.show()
    sys.exit(2)
with open(os.environ["CLI_LOG"], "a") as log:
    log.write(json.dumps({"command": name, **ctx.params}) + "\\n")
"""


def substitute(text: str, values: dict) -> str:
    """Cloud Build's substitution: $NAME and ${NAME}; $$ is a literal $."""
    return re.sub(
        r"\$\$|\$\{(\w+)\}|\$(\w+)", lambda m: "$" if m.group(0) == "$$" else values[m.group(1) or m.group(2)], text
    )


def used_names() -> set[str]:
    strings = [s for step in BUILD["steps"] for s in [step["name"], *step.get("args", [])]]
    return {m.group(1) or m.group(2) for s in strings for m in re.finditer(r"(?<!\$)\$\{(\w+)\}|(?<!\$)\$(\w+)", s)}


def image_name(name: str) -> str:
    return "${_REGION}-docker.pkg.dev/$PROJECT_ID/${_REPOSITORY}/" + name


def images(spec: dict) -> set[str]:
    return {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values() if "container" in e}


def run_step(step_id: str, workspace: Path, env: dict, **values) -> subprocess.CompletedProcess:
    step = STEPS[step_id]
    assert step["entrypoint"] == "bash"
    command = ["bash", *(substitute(arg, {**VALUES, **values}) for arg in step["args"])]
    return subprocess.run(command, cwd=workspace, env=env, capture_output=True, text=True, timeout=600)


def make_workspace(path: Path) -> Path:
    """/workspace as the steps see it: the checkout (linked) with the user's config, no build/ yet."""
    path.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("build", VALUES["_CONFIG"]):
            (path / entry.name).symlink_to(entry)
    (path / VALUES["_CONFIG"]).write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The steps' environment: docker faked, no TFPIPE_* settings from this machine."""
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    values = {k: v for k, v in os.environ.items() if not k.startswith("TFPIPE_")}
    return {**values, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DOCKER_LOG": str(bin_dir / "docker.log")}


@pytest.fixture(scope="module")
def pushed(tmp_path_factory, env):
    """A workspace after the push steps (fake docker): build/<image>.image hold the digests."""
    workspace = make_workspace(tmp_path_factory.mktemp("cloudbuild") / "workspace")
    for step_id in (f"push-{name}" for name in IMAGES):
        result = run_step(step_id, workspace, env)
        assert result.returncode == 0, result.stderr
    return workspace


@pytest.fixture
def parsed(tmp_path, pushed, env):
    """Runs a step with .venv/bin/python replaced by PARSE_CLI; returns (result, logged CLI calls)."""
    workspace = make_workspace(tmp_path / "workspace")
    (workspace / ".venv").unlink()
    (workspace / ".venv" / "bin").mkdir(parents=True)
    (workspace / "build").symlink_to(pushed / "build")
    (tmp_path / "parse_cli.py").write_text(PARSE_CLI)
    stub = workspace / ".venv" / "bin" / "python"
    stub.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "parse_cli.py"}" "$@"\n')
    stub.chmod(0o755)
    log = tmp_path / "cli.log"

    def run(step_id, **values):
        result = run_step(step_id, workspace, {**env, "CLI_LOG": str(log)}, **values)
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        log.unlink(missing_ok=True)
        return result, calls

    return run


def test_steps_and_their_order():
    assert list(STEPS) == list(WAIT_FOR)


def test_wait_for_graph():
    for position, (step_id, wanted) in enumerate(WAIT_FOR.items()):
        assert STEPS[step_id].get("waitFor") == wanted, step_id
        assert set(wanted or []) <= set(list(WAIT_FOR)[:position]), f"{step_id} waits for a later step"


def test_substitutions_declared_documented_and_used():
    declared = BUILD["substitutions"]
    used = used_names()
    assert {n for n in used if n.startswith("_")} == set(declared), "used and declared substitutions differ"
    assert used - set(declared) <= set(BUILTINS), "unknown substitution (write shell variables as $$NAME)"
    header = re.match(r"(?:#.*\n)*", TEXT).group(0)
    ci_docs = (ROOT / "docs/guides/ci-cd.md").read_text()
    section = ci_docs.split("## Cloud Build on merge", 1)[1].split("\n## ", 1)[0]
    for name, value in declared.items():
        assert re.fullmatch(r"_[A-Z0-9_]+", name) and isinstance(value, str), name
        assert re.search(rf"^#\s+{name}\s", header, re.M), f"{name} is not documented at the top of the file"
        assert f"`{name}`" in section, f"{name} is not documented in docs/guides/ci-cd.md"
    for name in used & set(BUILTINS):
        assert name in header


def test_images_tagged_short_sha_and_latest():
    assert {s[len("build-") :] for s in STEPS if s.startswith("build-")} == set(IMAGES)
    for name, (dockerfile, build_args) in IMAGES.items():
        args = STEPS[f"build-{name}"]["args"]
        assert args[:3] == ["build", "-f", dockerfile] and args[-1] == "."
        assert (ROOT / args[2]).is_file()
        assert [a for i, a in enumerate(args) if "--build-arg" in args[i - 1 : i + 1]] == build_args
        tags = [args[i + 1] for i, a in enumerate(args) if a == "-t"]
        assert tags == [f"{image_name(name)}:$SHORT_SHA", f"{image_name(name)}:latest"]
        assert len(args) == 3 + len(build_args) + 2 * len(tags) + 1
        assert f"docker push --all-tags {image_name(name)}\n" in STEPS[f"push-{name}"]["args"][1]


@pytest.mark.parametrize(
    "image, default_lock, gpu_lock",
    [
        ("trainer", "requirements-trainer.lock", "requirements-gpu.lock"),
        ("serving", "requirements-serving.lock", "requirements-serving-gpu.lock"),
    ],
)
def test_gpu_images_are_built_from_the_gpu_locks(image, default_lock, gpu_lock):
    """The build arg names the Dockerfile's LOCK argument and an existing lock other than the default one."""
    dockerfile = (ROOT / f"containers/{image}.Dockerfile").read_text()
    assert re.search(rf"^ARG LOCK={re.escape(default_lock)}$", dockerfile, re.M)
    assert re.search(r"^COPY \$\{LOCK\} requirements\.lock$", dockerfile, re.M)
    args = STEPS[f"build-{image}-gpu"]["args"]
    assert args[args.index("--build-arg") + 1] == f"LOCK={gpu_lock}" and (ROOT / gpu_lock).is_file()
    assert re.search(r"^nvidia-cudnn-cu12==", (ROOT / gpu_lock).read_text(), re.M)  # CUDA TensorFlow


def test_python_steps_match_the_images_python():
    base = re.search(
        r"^ARG PYTHON_IMAGE=python:(\S+?)-slim", (ROOT / "containers/trainer.Dockerfile").read_text(), re.M
    ).group(1)
    python_steps = [s for s in BUILD["steps"] if s["name"].startswith("python:")]
    assert {s["id"] for s in python_steps} == {s for s in WAIT_FOR if not s.startswith(("build-", "push-"))}
    assert {s["name"] for s in python_steps} == {f"python:{base}-bookworm"}


def test_test_step_is_the_readmes_test_command():
    step = STEPS["test"]
    readme_command = re.search(r"^(make \w+)\s+#.*\(what CI runs\)", (ROOT / "README.md").read_text(), re.M).group(1)
    assert " ".join([step["entrypoint"], *step["args"]]) == readme_command == "make test"


def test_push_steps_record_the_pushed_digests(pushed, env):
    log = Path(env["DOCKER_LOG"]).read_text()
    for name in IMAGES:
        ref = (pushed / "build" / f"{name}.image").read_text().strip()
        repository = f"europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/{name}"
        assert re.fullmatch(rf"{re.escape(repository)}@sha256:[0-9a-f]{{64}}", ref)
        assert f"push --all-tags {repository}\n" in log
        assert f"image inspect --format {{{{index .RepoDigests 0}}}} {repository}:abc1234\n" in log


def test_compile_training_sets_every_image_by_digest(parsed, pushed):
    """compile-training gets each pushed image's digest (build/<image>.image) as its platform field;
    compile-batch-prediction the two it has always had."""
    digests = {name: (pushed / "build" / f"{name}.image").read_text().strip() for name in IMAGES}
    result, calls = parsed("compile-training")
    assert result.returncode == 0, result.stdout + result.stderr
    (call,) = calls
    image_sets = [s for s in call["sets"] if s.split("=", 1)[0].endswith("_image")]
    assert image_sets == [f"platform.{TRAINING_IMAGES[name]}={digests[name]}" for name in IMAGES]
    result, calls = parsed("compile-batch-prediction")
    assert result.returncode == 0, result.stdout + result.stderr
    (call,) = calls
    assert [s for s in call["sets"] if s.split("=", 1)[0].endswith("_image")] == [
        f"platform.trainer_image={digests['trainer']}",
        f"platform.components_image={digests['components']}",
    ]


def test_compile_steps_run_locally(pushed, env):
    """The compile steps' commands, run as they are with the real CLI (both at once, as in Cloud Build)."""
    steps = ("compile-training", "compile-batch-prediction")
    procs = {}
    for step_id in steps:
        command = ["bash", *(substitute(arg, VALUES) for arg in STEPS[step_id]["args"])]
        procs[step_id] = subprocess.Popen(
            command, cwd=pushed, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for step_id, proc in procs.items():
        output = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, f"{step_id} failed:\n{output}"
    trainer = (pushed / "build" / "trainer.image").read_text().strip()
    components = (pushed / "build" / "components.image").read_text().strip()
    serving = (pushed / "build" / "serving.image").read_text().strip()
    training_text = (pushed / "build" / "training.yaml").read_text()
    training = yaml.safe_load(training_text)
    inputs = training["root"]["inputDefinitions"]["parameters"]
    assert inputs["source_commit"]["defaultValue"] == BUILTINS["COMMIT_SHA"]
    assert (inputs["epochs"]["defaultValue"], inputs["workers"]["defaultValue"]) == (40, 3)  # the prod profile
    assert trainer in training_text and "n1-standard-8" in training_text
    assert serving in training_text  # the uploaded model's containerSpec.imageUri
    assert "example.com/stale" not in training_text  # --set wins over the profile
    assert components in images(training)
    assert not [i for i in images(training) if "/tfpipe/" in i and "@sha256:" not in i], "an image not pinned"
    assert components in images(yaml.safe_load((pushed / "build" / "batch_prediction.yaml").read_text()))


def test_publish_publishes_what_compile_wrote(parsed):
    compiled = {}
    for step_id in ("compile-training", "compile-batch-prediction"):
        result, calls = parsed(step_id)
        assert result.returncode == 0, result.stdout + result.stderr
        (call,) = calls
        compiled[call["pipeline"]] = call["output"]
    result, calls = parsed("publish")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [c["command"] for c in calls] == ["publish", "publish"]
    assert {c["pipeline"]: c["template"] for c in calls} == compiled
    assert {(c["registry"], tuple(c["tags"])) for c in calls} == {(REGISTRY, ("abc1234",))}


@pytest.mark.parametrize(
    "step_id, substitution, command",
    [("submit-run", "_SUBMIT_RUN", "submit"), ("update-schedule", "_UPDATE_SCHEDULE", "schedule")],
)
def test_submit_and_schedule_are_guarded(parsed, step_id, substitution, command):
    assert BUILD["substitutions"][substitution] == "false"
    result, calls = parsed(step_id)
    assert result.returncode == 0 and calls == [], result.stderr
    result, calls = parsed(step_id, **{substitution: "yes"})
    assert result.returncode != 0 and calls == [] and "must be true or false" in result.stderr
    result, calls = parsed(step_id, **{substitution: "true"})
    assert result.returncode == 0, result.stdout + result.stderr
    (call,) = calls
    assert call["command"] == command and call["target"] == "vertex" and call["pipeline"] == "training"
    assert (call["registry"], call["template_tag"], call["template"]) == (REGISTRY, "abc1234", None)
    assert (call["config_file"], call["profile"]) == ("tfpipe.yaml", "prod")
    assert "platform.project=acme-ml-prod" in call["sets"]
    if command == "schedule":  # no --cron by default: the profile's schedule (and its time zone) stands
        assert BUILD["substitutions"]["_SCHEDULE_CRON"] == "" and call["cron"] is None
        result, calls = parsed(step_id, **{substitution: "true", "_SCHEDULE_CRON": "TZ=Asia/Tokyo 0 4 * * 2"})
        assert result.returncode == 0, result.stdout + result.stderr
        assert calls[0]["cron"] == "TZ=Asia/Tokyo 0 4 * * 2"


@pytest.mark.parametrize("short_sha, commit_sha", [("", ""), ("abc1234", "")])
def test_a_build_without_commit_stops_first(short_sha, commit_sha, tmp_path, env):
    """A manual build (no trigger) has no SHORT_SHA or COMMIT_SHA: check-build stops it with the command to run."""
    result = run_step("check-build", tmp_path, env, SHORT_SHA=short_sha, COMMIT_SHA=commit_sha)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "SHORT_SHA and COMMIT_SHA are empty (a build not started by a trigger): run gcloud builds submit "
        "--substitutions=SHORT_SHA=$(git rev-parse --short HEAD),COMMIT_SHA=$(git rev-parse HEAD)"
    )
    assert run_step("check-build", tmp_path, env).returncode == 0
