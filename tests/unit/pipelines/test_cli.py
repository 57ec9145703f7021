import os

import pytest
from click.testing import CliRunner

from pipelines.cli import cli
from pipelines.config import ConfigError, load_config
from tests.helpers.configs import IMAGE_SETS, SHIPPED


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def test_help_lists_commands():
    result = invoke("--help")
    assert result.exit_code == 0 and "run" in result.output and "compile" in result.output
    result = invoke("run", "--help")
    for option in ("--data-source", "--workers", "--epochs", "--out", "--config"):
        assert option in result.output


def test_missing_data_source_is_one_line(tmp_path):
    result = invoke("run", "--data-source", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: data source not found: {tmp_path / 'nope'}"


def test_bad_option_types_and_values(tmp_path):
    result = invoke("run", "--workers", "two")
    assert result.exit_code == 2 and "'two' is not a valid integer" in result.output
    result = invoke("run", "--workers", "0", "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert "invalid configuration: parameters.workers: Input should be greater than or equal to 1" in result.output


def test_config_file_validation(tmp_path):
    (tmp_path / "c.yaml").write_text("parameters:\n  epochs: 3\n  learning_rate: -1\n")
    with pytest.raises(ConfigError, match="parameters.learning_rate: Input should be greater than 0"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text("parameters:\n  epochz: 3\n")
    with pytest.raises(ConfigError, match="parameters.epochz: Extra inputs are not permitted"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "c.yaml").write_text("parameters:\n  epochs: 3\nplatform:\n  machine_type: n1-highmem-8\n")
    config = load_config(tmp_path / "c.yaml", {"epochs": 7, "workers": None})
    assert config.parameters.epochs == 7 and config.platform.machine_type == "n1-highmem-8"
    (tmp_path / "c.yaml").write_text("parameters:\n  workers: many\n")
    with pytest.raises(ConfigError, match="parameters.workers: Input should be a valid integer.*'many'"):
        load_config(tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="val_fraction \\+ test_fraction must be < 1"):
        load_config(None, {"val_fraction": 0.5, "test_fraction": 0.5})


def test_compile_both_targets_with_config_defaults(tmp_path):
    import yaml

    (tmp_path / "c.yaml").write_text(
        "parameters:\n  epochs: 7\nplatform:\n  trainer_image: r/trainer:1\n  components_image: r/components:1\n"
        "  serving_image: r/serving:1\n"
    )
    for target in ("vertex", "kubeflow"):
        out = tmp_path / f"{target}.yaml"
        result = invoke("compile", "--target", target, "--output", str(out), "--config", str(tmp_path / "c.yaml"))
        assert result.exit_code == 0, result.output
        spec = next(yaml.safe_load_all(out.read_text()))  # kubeflow: then the platform spec (volume mounts)
        assert spec["root"]["inputDefinitions"]["parameters"]["epochs"]["defaultValue"] == 7
    assert "r/trainer:1" in (tmp_path / "vertex.yaml").read_text()
    result = invoke("compile", "--target", "local", "--output", str(tmp_path / "x.yaml"))
    assert result.exit_code == 2 and "'local' is not one of 'vertex', 'kubeflow'" in result.output


def test_a_vertex_compile_with_images_by_tag_warns_in_one_line(tmp_path):
    """Compiling needs no registry: the images stay as given, and the Vertex template's tags are named, since
    Vertex's cache keys on the image string (a Kubeflow template runs by tag as it always did)."""
    digest = "sha256:" + "ab" * 32
    (tmp_path / "c.yaml").write_text(
        f"platform:\n  trainer_image: r/trainer:1\n  components_image: r/components@{digest}\n"
        "  serving_image: r/serving:latest\n"
    )
    args = ["--config", str(tmp_path / "c.yaml"), "--output"]
    result = invoke("compile", "--target", "vertex", *args, str(tmp_path / "v.yaml"))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"compiled vertex training pipeline to {tmp_path / 'v.yaml'}\n"
    assert result.stderr == (
        "warning: images by tag, not digest: r/serving:latest, r/trainer:1; Vertex caches steps on the image name, "
        "so a run of this template may reuse steps of an older image under the same tag (submit and schedule pin "
        "them; docs/guides/vertex.md#images-and-the-cache)\n"
    )
    result = invoke("compile", "--target", "kubeflow", *args, str(tmp_path / "k.yaml"))
    assert result.exit_code == 0 and result.stderr == ""
    pinned = [
        "--set",
        f"platform.trainer_image=r/trainer@{digest}",
        "--set",
        f"platform.serving_image=r/serving@{digest}",
    ]
    result = invoke("compile", "--target", "vertex", *pinned, *args, str(tmp_path / "p.yaml"))
    assert result.exit_code == 0 and result.stderr == ""


def test_batch_options_only_with_the_batch_pipeline(tmp_path):
    result = invoke("run", "--excluded-fields", "label", "--key-field", "id", "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert result.output.strip() == "Error: --key-field, --excluded-fields: only with --pipeline batch_prediction"
    result = invoke(
        "run",
        "--pipeline",
        "batch_prediction",
        "--instances",
        str(tmp_path / "a.csv"),
        "--included-fields",
        "a",
        "--excluded-fields",
        "b",
        "--out",
        str(tmp_path / "o"),
    )
    assert result.exit_code == 1 and "give included_fields or excluded_fields, not both" in result.output


def test_the_servers_own_command_is_the_serve_verb():
    """`python -m serving` takes what `python -m pipelines serve` takes, and checks it the same way (before it loads
    TensorFlow)."""
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120)

    own, verb = run("serving", "--help"), run("pipelines", "serve", "--help")
    assert own.returncode == verb.returncode == 0
    assert own.stdout.startswith("Usage: python -m serving [OPTIONS]\n")
    assert verb.stdout.startswith("Usage: python -m pipelines serve [OPTIONS]\n")
    assert own.stdout.partition("\n")[2] == verb.stdout.partition("\n")[2]
    for option in ("--model-base-path", "--rest-port", "--grpc-port", "--enable-batching", "--ready-file"):
        assert option in own.stdout
    bad = run("serving", "--model-base-path", "m", "--model-name", "n", "--versions", "x")
    assert bad.returncode == 1 and "tensorflow" not in bad.stderr.lower()
    assert bad.stderr == "Error: --versions takes integers like 1,3 and --label takes LABEL=VERSION like stable=3\n"


EXAMPLES = "Error: the config still holds example values (edit them or --set them): "
IMAGES = ["platform.components_image", "platform.trainer_image", "platform.serving_image"]
RUN = ["platform.project", "platform.pipeline_root", "platform.service_account", *IMAGES]
DATA = "parameters.data_source"  # the prod profile's data, in the example bucket


@pytest.mark.parametrize(
    "profile, args, fields",
    [
        ("prod", ["compile", "--target", "vertex", "--output", "t.yaml"], ["platform.service_account", *IMAGES, DATA]),
        ("prod", ["compile", "--target", "kubeflow", "--output", "t.yaml"], [*IMAGES, DATA]),
        ("prod", ["submit", "--target", "vertex"], [*RUN, DATA]),
        (
            "prod",
            ["submit", "--target", "kubeflow", "--host", "http://127.0.0.1:9"],
            ["platform.pipeline_root", *IMAGES, DATA],
        ),
        ("prod", ["schedule", "--target", "vertex"], [*RUN, DATA]),
        ("prod", ["publish", "--tag", "v1"], ["platform.service_account", *IMAGES, "platform.template_registry", DATA]),
        ("prod", ["submit", "--target", "vertex", "--template-tag", "v1"], [*RUN[:3], "platform.template_registry"]),
        ("dev", ["compile", "--target", "vertex", "--output", "t.yaml"], ["platform.service_account", *IMAGES]),
        ("dev", ["schedule", "--target", "vertex"], RUN),  # before the cron the dev profile lacks
        ("dev", ["schedule", "list", "--target", "vertex"], ["platform.project"]),
    ],
)
def test_the_shipped_config_is_refused_until_edited(tmp_path, monkeypatch, profile, args, fields):
    """One line naming every field that still holds tfpipe.yaml's example names, before anything else (the edited
    file passes: tests/unit/pipelines/test_config.py, tests/unit/pipelines/test_cli_errors.py)."""
    for name in [n for n in os.environ if n.startswith("TFPIPE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    config = load_config(SHIPPED, profile=profile)
    values = {f: getattr(getattr(config, f.split(".")[0]), f.split(".")[1]) for f in fields}
    assert all("my-project" in v or "my-dev-project" in v for v in values.values())
    result = CliRunner().invoke(cli, [*args, "--config", str(SHIPPED), "--profile", profile])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == EXAMPLES + ", ".join(f"{f}={v}" for f, v in values.items()) + "\n"
    assert not (tmp_path / "t.yaml").exists()


def test_verbose_option_and_help_texts():
    result = invoke("--help")
    assert (
        "-v, --verbose" in result.output and "with an error of a cloud call, print its traceback too" in result.output
    )
    result = invoke("promote", "--help")
    assert "earlier deployed models to keep at 0 % [platform.keep_previous]" in " ".join(result.output.split())
    assert "%%" not in result.output


def test_run_and_rehearse_take_the_shipped_config_as_it_is(tmp_path, monkeypatch):
    """The local verbs send nothing to the cloud: the example values stay (each run here stops at its own check)."""
    for name in [n for n in os.environ if n.startswith("TFPIPE_")]:
        monkeypatch.delenv(name)
    shipped = ["--config", str(SHIPPED), "--profile", "prod"]
    result = invoke("run", *shipped, "--data-source", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert (result.exit_code, result.output) == (1, f"Error: data source not found: {tmp_path / 'nope'}\n")
    result = invoke("rehearse", *shipped, "--param", "epochz=3", "--out", str(tmp_path / "r"))
    assert result.exit_code == 1
    assert result.output.startswith("Error: --param epochz: not an input of tfpipe-training; its inputs are: ")


SEGMENT = (
    "one path segment of 1 to 128 ASCII letters, digits, '.', '_' and '-', starting with a letter or digit (no '/', "
    "no '..', no leading '.')"
)


@pytest.mark.parametrize(
    "args, field",
    [
        (["--accuracy-threshold", "0"], "parameters.model_name"),
        (["--pipeline", "batch_prediction", "--instances", "x.jsonl"], "batch.model_name"),
    ],
)
def test_a_model_name_that_would_leave_the_repository_stops_run_before_any_step(tmp_path, monkeypatch, args, field):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)  # the repository's default, runs/model_repository, is relative to it
    result = invoke("run", "--model-name", "../../escape", *args)
    assert (result.exit_code, result.output) == (
        1,
        f"Error: invalid configuration: {field}: {SEGMENT} (got '../../escape') (from the command line)\n",
    )
    assert list(tmp_path.rglob("*")) == [tmp_path / "a", work]  # no run folder, no repository, no escape


@pytest.mark.parametrize(
    "name, message",
    [
        ("Bad Name!", f"parameters.model_name: {SEGMENT} (got 'Bad Name!') (from --set parameters.model_name)"),
        (
            "Bad_Name",
            "parameters.model_name: a KServe InferenceService name: 1 to 46 lowercase letters, digits and '-', starting "
            "with a letter, ending with a letter or digit (KServe's and Knative's latest-NAME-predictor must stay a "
            "DNS label of at most 63) (got 'Bad_Name'): on kubeflow it names the InferenceService (or set "
            "platform.kubeflow.inference_service)",
        ),
    ],
)
def test_a_model_name_kubernetes_would_refuse_stops_the_kubeflow_compile(tmp_path, name, message):
    output = tmp_path / "t.yaml"
    result = invoke(
        "compile",
        "--target",
        "kubeflow",
        "--set",
        f"parameters.model_name={name}",
        *IMAGE_SETS,
        "--output",
        str(output),
    )
    assert (result.exit_code, result.output) == (1, f"Error: invalid configuration: {message}\n")
    assert not output.exists()


def test_the_servers_commands_refuse_a_hostile_model_name(tmp_path):
    for args in (
        ["serve", "--model-base-path", str(tmp_path), "--model-name", "../x"],
        ["stop-serving", "--model-base-path", str(tmp_path), "--model-name", "../x"],
    ):
        result = invoke(*args)
        assert (result.exit_code, result.output) == (1, f"Error: --model-name: {SEGMENT} (got '../x')\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["submit", "--target", "vertex", "--experiment", "My Experiment"],
            "--experiment: a Vertex AI Experiment name: 1 to 128 lowercase letters, digits and '-', starting with a "
            "letter or digit (got 'My Experiment')",
        ),
        (
            ["submit", "--target", "vertex", "--run-name", "x" * 129],
            "--run-name: a display name: 1 to 128 characters (UTF-8), no control characters "
            f"(got '{'x' * 76}...)",  # long values shortened
        ),
        (
            ["schedule", "--target", "vertex", "--display-name", "weekly\nrun"],
            "--display-name: a display name: 1 to 128 characters (UTF-8), no control characters (got 'weekly\\nrun')",
        ),
    ],
)
def test_names_given_as_options_are_checked_before_the_config(args, message):
    result = invoke(*args, "--config", "does-not-exist.yaml")  # refused before the config is even read
    assert (result.exit_code, result.output) == (1, f"Error: {message}\n")
