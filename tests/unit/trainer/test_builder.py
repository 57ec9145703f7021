"""Your own model: `trainer.model: package.module:function` (trainer/builder.py), from the config through every
target's trainer arguments (the model it trains: tests/e2e/test_training.py)."""

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipelines.cli import cli
from pipelines.config import ConfigError, TrainerSettings, load_config
from tests.helpers.configs import IMAGE_SETS
from trainer import builder

ROOT = Path(__file__).resolve().parents[3]
CUSTOM = "tests.helpers.custom_model:build_small_cnn"
# a study over the custom model's own hyperparameter and the trainer's learning rate
STUDY = (
    "study.parameters=[{parameter_id: conv_blocks, type: integer, min: 1, max: 2}, "
    "{parameter_id: learning_rate, type: double, min: 0.001, max: 0.01, scale: log}]"
)
STUDY_ENV = {"TFPIPE_STUDY__PARAMETERS": STUDY.partition("=")[2]}
DIGITS = {"kind": "image", "input_shape": [8, 8, 1], "labels": [str(i) for i in range(10)]}


def test_specs_parse_and_malformed_ones_are_refused():
    assert builder.parse(CUSTOM) == ("tests.helpers.custom_model", "build_small_cnn")
    assert builder.parse(builder.DEFAULT_BUILDER) == ("trainer.model", "build_model")
    for bad in (
        "tests/helpers/custom_model.py",
        "tests.helpers.custom_model",
        "tests.helpers.custom_model:",
        ":build",
        "a.b:c.d",
        "1a:b",
    ):
        with pytest.raises(builder.BuilderError) as e:
            builder.parse(bad)
        assert str(e.value) == (
            f"{bad!r} is not a builder like package.module:function (a module on the Python "
            "path, a colon, a function of that module), e.g. trainer.model:build_model"
        )


def test_find_reads_the_module_without_running_it(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mynets").mkdir()
    (tmp_path / "mynets" / "__init__.py").write_text("")
    (tmp_path / "mynets" / "cnn.py").write_text(
        "raise RuntimeError('never run')\n"
        "from functools import partial\n"
        "def build(stats, hparams):\n    pass\n"
        "wide = partial(build)\n"
        "try:\n    from os.path import join as joined\nexcept ImportError:\n    pass\n"
    )
    (tmp_path / "broken.py").write_text("def build(stats, hparams)\n    pass\n")
    for name in ("build", "wide", "joined", "partial"):
        assert builder.find(f"mynets.cnn:{name}") == str(tmp_path / "mynets" / "cnn.py")
    assert builder.find(builder.DEFAULT_BUILDER) == str(ROOT / "trainer" / "model.py")
    assert builder.find(CUSTOM) == str(ROOT / "tests" / "helpers" / "custom_model.py")
    for spec, message in [
        (
            "mynets.cnn:deep",
            f"builder mynets.cnn:deep: module mynets.cnn ({tmp_path}/mynets/cnn.py) has no function 'deep'",
        ),
        (
            "mynets.rnn:build",
            "builder mynets.rnn:build: no module named 'mynets.rnn' on the Python path (the "
            "repository's root, or an installed package)",
        ),
        (
            "nowhere.cnn:build",
            "builder nowhere.cnn:build: cannot import module 'nowhere.cnn' (No module named "
            "'nowhere'); put it on the Python path (the repository's root, or an installed "
            "package)",
        ),
        ("broken:build", f"builder broken:build: {tmp_path}/broken.py line 1: expected ':'"),
    ]:
        with pytest.raises(builder.BuilderError) as e:
            builder.find(spec)
        assert str(e.value) == message


def test_load_imports_the_builder_or_names_what_is_missing(tmp_path, monkeypatch):
    from tests.helpers import custom_model

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "needs_more.py").write_text("import tfpipe_not_installed\n\ndef build(stats, hparams):\n    pass\n")
    (tmp_path / "constants.py").write_text("WIDTH = 3\n")
    assert builder.load(CUSTOM) is custom_model.build_small_cnn
    for spec, message in [
        (
            "tests.helpers.custom_model:build_large_cnn",
            "builder tests.helpers.custom_model:build_large_cnn: module tests.helpers.custom_model has no function 'build_large_cnn'",
        ),
        (
            "needs_more:build",
            "builder needs_more:build: cannot import module 'needs_more' (it imports "
            "'tfpipe_not_installed', which is not installed)",
        ),
        ("tfpipe_missing:build", "builder tfpipe_missing:build: cannot import module 'tfpipe_missing'"),
        ("constants:WIDTH", "builder constants:WIDTH: constants.WIDTH is not callable"),
    ]:
        with pytest.raises(builder.BuilderError) as e:
            builder.load(spec)
        assert str(e.value) == message


def test_check_names_what_a_built_model_lacks():
    import tf_keras as keras

    def dense(inputs, units=10):
        return keras.layers.Dense(units, activation="softmax")(keras.layers.Flatten()(inputs))

    pixels = keras.Input((8, 8, 1))
    builder.check(keras.Model(pixels, dense(pixels)), DIGITS, CUSTOM)
    any_size = keras.Input((None, None, 1))
    builder.check(keras.Model(any_size, dense(keras.layers.Resizing(8, 8)(any_size))), DIGITS, CUSTOM)
    other = keras.Input((8, 8, 1))
    wide, ints = keras.Input((28, 28, 1)), keras.Input((8, 8, 1), dtype="int32")
    cast = keras.layers.Rescaling(1.0)(ints)
    for model, message in [
        (
            {"probabilities": None},
            "returned a builtins.dict, not a tf-keras Model (build it with `import tf_keras as "
            "keras`: Keras 3 models cannot train under MultiWorkerMirroredStrategy)",
        ),
        (
            keras.Model([pixels, other], dense(keras.layers.Concatenate()([pixels, other]))),
            "returned a model with 2 inputs; the serving signature takes one (the pixel array or feature vector)",
        ),
        (
            keras.Model(pixels, [dense(pixels), dense(pixels)]),
            "returned a model with 2 outputs; the serving signature needs one (the class probabilities)",
        ),
        (keras.Model(ints, dense(cast)), "returned a model whose input is int32; the serving signature sends float32"),
        (
            keras.Model(wide, dense(wide)),
            "returned a model whose input takes [28, 28, 1] per example; the data gives [8, 8, 1] (None: any size)",
        ),
        (
            keras.Model(pixels, dense(pixels, 3)),
            "returned a model whose output is [3] per example; the serving signature's probabilities need [10] (one "
            "per class, softmax)",
        ),
    ]:
        with pytest.raises(builder.BuilderError) as e:
            builder.check(model, DIGITS, CUSTOM)
        assert str(e.value) == f"builder {CUSTOM} {message}"


def test_trainer_flag(capsys):
    from trainer.flags import parse_args

    assert parse_args(["--data-dir", "d", "--job-dir", "j"], {}).model == "trainer.model:build_model"
    assert parse_args(["--data-dir", "d", "--job-dir", "j", "--model", CUSTOM], {}).model == CUSTOM
    with pytest.raises(SystemExit):
        parse_args(["--data-dir", "d", "--job-dir", "j", "--model", "custom_model.py"], {})
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m trainer.task: error: --model: 'custom_model.py' is not a builder like package.module:function (a "
        "module on the Python path, a colon, a function of that module), e.g. trainer.model:build_model"
    )


def test_config_section_default_overrides_and_errors():
    assert load_config(None, environ={}).trainer == TrainerSettings(model="trainer.model:build_model")
    assert load_config(None, environ={"TFPIPE_TRAINER__MODEL": CUSTOM, **STUDY_ENV}).trainer.model == CUSTOM
    assert load_config(None, sets=[f"trainer.model={CUSTOM}", STUDY], environ={}).trainer.model == CUSTOM
    with pytest.raises(ConfigError) as e:
        load_config(None, sets=["trainer.model=tests/helpers/custom_model.py"], environ={})
    assert str(e.value) == (
        "invalid configuration: trainer.model: 'tests/helpers/custom_model.py' is not a builder like package.module:function "
        "(a module on the Python path, a colon, a function of that module), e.g. trainer.model:build_model (from "
        "--set trainer.model)"
    )
    with pytest.raises(ConfigError) as e:
        TrainerSettings(model="tests.helpers.custom_model:build_large_cnn").check_builder()
    assert str(e.value) == (
        f"invalid configuration: trainer.model: builder tests.helpers.custom_model:build_large_cnn: "
        f"module tests.helpers.custom_model ({ROOT}/tests/helpers/custom_model.py) has no function "
        "'build_large_cnn'"
    )


@pytest.fixture
def no_tfpipe_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith("TFPIPE_")]:
        monkeypatch.delenv(name)


def test_compile_and_run_fail_early_naming_the_missing_builder(tmp_path, no_tfpipe_env):
    message = (
        "Error: invalid configuration: trainer.model: builder tests.helpers.custom_model:build_large_cnn: module "
        f"tests.helpers.custom_model ({ROOT}/tests/helpers/custom_model.py) has no function 'build_large_cnn'\n"
    )
    result = CliRunner().invoke(
        cli,
        [
            "compile",
            "--target",
            "vertex",
            "--set",
            "trainer.model=tests.helpers.custom_model:build_large_cnn",
            *IMAGE_SETS,
            "--output",
            str(tmp_path / "training.yaml"),
        ],
    )
    assert (result.exit_code, result.output) == (1, message)
    result = CliRunner().invoke(
        cli,
        ["run", "--set", "trainer.model=tests.helpers.custom_model:build_large_cnn", "--out", str(tmp_path / "run")],
    )
    assert (result.exit_code, result.output) == (1, message)
    assert not (tmp_path / "run").exists()


def _compiled_tasks(target, tmp_path, *sets):
    """Every task of the compiled training pipeline (condition groups flattened): name → parameter inputs."""
    out = tmp_path / f"{target}.yaml"
    sets = [item for s in (*SETUP_SETS, *sets) for item in ("--set", s)] + IMAGE_SETS
    result = CliRunner().invoke(cli, ["compile", "--target", target, *sets, "--output", str(out)])
    assert result.exit_code == 0, result.output
    spec = next(yaml.safe_load_all(out.read_text()))  # the pipeline spec (kubeflow: then the platform spec)
    dags = [spec["root"]["dag"], *(c["dag"] for c in spec["components"].values() if "dag" in c)]
    return {
        name: {k: v.get("runtimeValue", {}).get("constant", v) for k, v in task["inputs"]["parameters"].items()}
        for d in dags
        for name, task in d["tasks"].items()
        if "parameters" in task.get("inputs", {})
    }


# the custom model, its own hyperparameter studied and fixed (the study's value wins), a fixed trainer's own one
SETUP_SETS = (
    f"trainer.model={CUSTOM}",
    STUDY,
    "trainer.mixed_precision=mixed_bfloat16",
    "trainer.hyperparameters.conv_blocks=3",
    "trainer.hyperparameters.optimizer=sgd",
    "study.metric_id=val_loss",
    "study.goal=minimize",
)
SETUP = {
    "model": CUSTOM,
    "mixed_precision": "mixed_bfloat16",
    "hyperparameters": {"conv_blocks": 3, "optimizer": "sgd"},
    "metric": "val_loss",  # the study's: the final training keeps its best checkpoint by it
}


def test_the_trainer_setup_reaches_every_targets_trainer_arguments(tmp_path, no_tfpipe_env):
    from kfp.dsl import Artifact, Dataset

    from components.plan_vertex_training import plan_vertex_training

    vertex = _compiled_tasks("vertex", tmp_path)
    plans = {name: inputs for name, inputs in vertex.items() if name.startswith("plan-vertex-training")}
    assert sorted(plans) == ["plan-vertex-training", "plan-vertex-training-2"]  # the tuning job's, the custom job's
    assert [inputs["trainer"] for inputs in plans.values()] == [SETUP, SETUP]
    setup = ["--model", CUSTOM, "--mixed-precision", "mixed_bfloat16", "--hypertune-metric-tag", "val_loss"]
    for tuned, expected in (
        ([], [*setup, "--conv-blocks", "3", "--optimizer", "sgd", "--batch-size", "32", "--learning-rate", "0.003"]),
        (["conv_blocks", "learning_rate"], [*setup, "--optimizer", "sgd", "--batch-size", "32"]),  # a tuning job's
    ):
        specs, _, _ = plan_vertex_training(
            Dataset(uri="gs://b/root/prepare-data/dataset"),
            "trainer:1",
            "n1-standard-4",
            "",
            0,
            2,
            3,
            {"batch_size": 32.0, "learning_rate": 0.003},
            tuned,
            0,
            SETUP,
            "run-1",
            "train",
            {"location": "europe-west4"},
            Artifact(uri="gs://b/root/plan/job_dir"),
        )
        assert [s["container_spec"]["args"] for s in specs] == [
            ["--data-dir", "gs://b/root/prepare-data/dataset", *expected, "--epochs", "3"]
        ] * 2
    kubeflow = _compiled_tasks("kubeflow", tmp_path)
    assert (kubeflow["tune-on-katib"]["trainer"], kubeflow["train-model-on-operator"]["trainer"]) == (SETUP, SETUP)
    in_pod = _compiled_tasks("kubeflow", tmp_path, "platform.kubeflow.training=pod", "platform.kubeflow.tuning=pod")
    assert (in_pod["tune-hyperparameters"]["trainer"], in_pod["train-model"]["trainer"]) == (SETUP, SETUP)


def test_default_builder_goes_the_same_way(tmp_path, no_tfpipe_env):
    out = tmp_path / "kubeflow.yaml"
    assert (
        CliRunner().invoke(cli, ["compile", "--target", "kubeflow", *IMAGE_SETS, "--output", str(out)]).exit_code == 0
    )
    tasks = next(yaml.safe_load_all(out.read_text()))["root"]["dag"]["tasks"]
    assert [
        tasks[name]["inputs"]["parameters"]["trainer"]["runtimeValue"]["constant"]
        for name in ("tune-on-katib", "train-model-on-operator")
    ] == [
        {
            "model": "trainer.model:build_model",
            "mixed_precision": "none",
            "hyperparameters": {},
            "metric": "val_accuracy",
        }
    ] * 2
