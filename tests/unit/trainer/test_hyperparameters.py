"""Hyperparameters declared by a builder's signature (trainer/hyperparameters.py), read from the source, checked
against the config's study and fixed values at config load and by the trainer's flags."""

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli import cli
from pipelines.config import ConfigError, load_config
from trainer import builder, hyperparameters
from trainer.flags import declared, parse_args
from trainer.hyperparameters import Hyperparameter

CUSTOM = "tests.helpers.custom_model:build_small_cnn"
OWN = (
    "the trainer's own are learning_rate (float), batch_size (int), seed (int), optimizer (one of adam, adamw, nadam, "
    "sgd, rmsprop, adagrad)"
)


def test_builders_declare_their_hyperparameters_in_their_signatures_read_without_importing_them():
    for module in ("tests.helpers.custom_model", "trainer.model"):
        sys.modules.pop(module, None)
    assert hyperparameters.read(CUSTOM) == {
        "filters": Hyperparameter("filters", int, 16),
        "dropout": Hyperparameter("dropout", float, 0.2),
        "conv_blocks": Hyperparameter("conv_blocks", int, 1),
    }
    assert list(hyperparameters.read(builder.DEFAULT_BUILDER).values()) == [
        Hyperparameter("dropout", float, 0.2),
        Hyperparameter("hidden_units", int, 128),
        Hyperparameter("filters", int, 16),
        Hyperparameter("image_size", int, 0),
    ]
    assert "tests.helpers.custom_model" not in sys.modules and "trainer.model" not in sys.modules
    assert declared(CUSTOM).training == {
        "learning_rate": Hyperparameter("learning_rate", float, 0.001),
        "batch_size": Hyperparameter("batch_size", int, 32),
        "seed": Hyperparameter("seed", int, 42),
        "optimizer": Hyperparameter("optimizer", str, "adam", ("adam", "adamw", "nadam", "sgd", "rmsprop", "adagrad")),
    }


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "def build(stats, hparams):\n    pass\n",
            "builder models_x:build: takes (stats, hparams); a builder takes the data's statistics, then its "
            "hyperparameters after a `*`, e.g. def build(stats, *, dropout: float = 0.2)",
        ),
        (
            "def build(stats, *, units=3):\n    pass\n",
            "builder models_x:build: hyperparameter units needs an annotation int, float, str, bool or Literal[...] "
            "of one of them",
        ),
        (
            "def build(stats, *, units: int):\n    pass\n",
            "builder models_x:build: hyperparameter units needs a literal default: units takes an int, got None",
        ),
        (
            "from typing import Literal\n\ndef build(stats, *, act: Literal['relu', 'selu'] = 'tanh'):\n    pass\n",
            "builder models_x:build: hyperparameter act needs a literal default: act takes one of relu, selu, got "
            "'tanh'",
        ),
        (
            "def build(stats, *, seed: int = 1):\n    pass\n",
            "builder models_x:build: hyperparameter seed is the trainer's own (learning_rate, batch_size, seed, "
            "optimizer, data_dir, job_dir, model_dir, checkpoint_dir, log_dir, model, epochs, batch_workers, "
            "steps_per_epoch, steps_per_execution, cache_max_mb, mixed_precision, hypertune_metric_tag, "
            "warm_start_from are); give it another name",
        ),
        (
            "build = print\n",
            "builder models_x:build: {path} defines build otherwise than with a top-level def; the hyperparameters "
            "are read from the def's signature",
        ),
    ],
)
def test_a_declaration_that_breaks_the_rules_is_refused(tmp_path, monkeypatch, source, message):
    (tmp_path / "models_x.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(builder.BuilderError) as e:
        declared("models_x:build")
    assert str(e.value) == message.format(path=tmp_path / "models_x.py")


def test_values_are_typed_by_their_declaration():
    blocks, rate = Hyperparameter("conv_blocks", int, 1), Hyperparameter("dropout", float, 0.2)
    act, flag = Hyperparameter("act", str, "relu", ("relu", "selu")), Hyperparameter("bn", bool, False)
    assert [blocks.parse(v) for v in (3, 3.0, "3", "3.0")] == [3, 3, 3, 3]
    assert [rate.parse(v) for v in (1, "0.5", 0.25)] == [1.0, 0.5, 0.25]
    assert [act.parse("selu"), flag.parse("true"), flag.parse(False)] == ["selu", True, False]
    for h, value, message in (
        (blocks, 2.5, "conv_blocks takes an int, got 2.5"),
        (blocks, True, "conv_blocks takes an int, got True"),
        (rate, "high", "dropout takes a float, got 'high'"),
        (act, "tanh", "act takes one of relu, selu, got 'tanh'"),
        (act, 1, "act takes one of relu, selu, got 1"),
        (flag, "yes", "bn takes a bool (true or false), got 'yes'"),
    ):
        with pytest.raises(ValueError) as e:
            h.parse(value)
        assert str(e.value) == message


def test_the_trainer_takes_the_declared_flags_typed_and_refuses_others(capsys):
    args = parse_args(
        ["--data-dir", "d", "--job-dir", "j", "--model", CUSTOM, "--conv_blocks=2.0", "--optimizer", "rmsprop"], {}
    )
    assert args.hyperparameters == {
        "learning_rate": 0.001,
        "batch_size": 32,
        "seed": 42,
        "optimizer": "rmsprop",
        "filters": 16,
        "dropout": 0.2,
        "conv_blocks": 2,
    }
    with pytest.raises(SystemExit):
        parse_args(["--data-dir", "d", "--job-dir", "j", "--model", CUSTOM, "--hidden-units", "64"], {})
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"python -m trainer.task: error: --hidden-units: no hyperparameter 'hidden_units': the model {CUSTOM} declares "
        f"filters (int), dropout (float), conv_blocks (int); {OWN}"
    )


STUDY = "study.parameters=[{parameter_id: %s, type: %s, %s}]"


@pytest.mark.parametrize(
    "sets, message",
    [
        (
            [STUDY % ("n_hidden", "integer", "min: 1, max: 3")],
            f"study.parameters.n_hidden: no hyperparameter 'n_hidden': the model {CUSTOM} declares filters (int), "
            f"dropout (float), conv_blocks (int); {OWN}",
        ),
        (
            [],  # the default study tunes the built-in model's hidden_units
            f"study.parameters.hidden_units (a parameter of the default study: set study.parameters): no "
            f"hyperparameter 'hidden_units': the model {CUSTOM} declares filters (int), dropout (float), conv_blocks "
            f"(int); {OWN}",
        ),
        (
            [STUDY % ("conv_blocks", "double", "min: 1, max: 3")],
            "study.parameters.conv_blocks: conv_blocks takes an int, not a double range: give it type: integer or "
            "type: discrete whole numbers",
        ),
        (
            [STUDY % ("optimizer", "double", "min: 0.1, max: 0.2")],
            "study.parameters.optimizer: optimizer takes one of adam, adamw, nadam, sgd, rmsprop, adagrad, not a "
            "double range: list them as type: categorical values",
        ),
        (
            [STUDY % ("optimizer", "categorical", "values: [adam, lion]")],
            "study.parameters.optimizer: optimizer takes one of adam, adamw, nadam, sgd, rmsprop, adagrad, got 'lion'",
        ),
        (
            [STUDY % ("conv_blocks", "discrete", "values: [1, 2.5]")],
            "study.parameters.conv_blocks: conv_blocks takes an int, got 2.5",
        ),
        (
            [STUDY % ("conv_blocks", "integer", "min: 1, max: 3"), "trainer.hyperparameters.dropout=high"],
            "trainer.hyperparameters.dropout: dropout takes a float, got 'high'",
        ),
        (
            [STUDY % ("conv_blocks", "integer", "min: 1, max: 3"), "trainer.hyperparameters.learning_rate=0.1"],
            "trainer.hyperparameters.learning_rate: a pipeline parameter; set parameters.learning_rate instead",
        ),
    ],
)
def test_the_config_loader_refuses_an_unknown_or_mistyped_hyperparameter(sets, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, sets=[f"trainer.model={CUSTOM}", *sets], environ={})
    assert str(e.value) == f"invalid configuration: {message}"


def test_fixed_values_are_typed_at_config_load():
    config = load_config(
        None,
        sets=[
            f"trainer.model={CUSTOM}",
            STUDY % ("conv_blocks", "categorical", "values: ['1', '2']"),
            "trainer.hyperparameters.conv_blocks=3",
            "trainer.hyperparameters.optimizer=sgd",
            "trainer.mixed_precision=mixed_float16",
        ],
        environ={},
    )
    assert config.trainer.setup().as_dict() == {
        "model": CUSTOM,
        "mixed_precision": "mixed_float16",
        "hyperparameters": {"conv_blocks": 3, "optimizer": "sgd"},
        "metric": "val_accuracy",
    }


def test_the_final_training_keeps_its_best_checkpoint_by_the_studys_metric():
    """The study's metric reaches every training's command line (unless the trainer's default), so the final
    training's `best` checkpoint is the best by what the study optimized."""
    from trainer.flags import TrainerSetup, command_line, parse_args

    setup = TrainerSetup(metric="val_loss")
    args = command_line({"epochs": 2}, data_dir="d", job_dir="j", trainer=setup)
    assert args == [
        "--data-dir",
        "d",
        "--job-dir",
        "j",
        "--model",
        setup.model,
        "--hypertune-metric-tag",
        "val_loss",
        "--epochs",
        "2",
    ]
    assert parse_args(args, {}).hypertune_metric_tag == "val_loss"
    assert "--hypertune-metric-tag" not in command_line(trainer=TrainerSetup())


def test_the_cli_refuses_an_unknown_study_parameter_in_one_line(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("TFPIPE_")]:
        monkeypatch.delenv(name)
    result = CliRunner().invoke(
        cli,
        ["run", "--set", STUDY % ("n_hidden", "integer", "min: 1, max: 3"), "--out", str(tmp_path / "run")],
    )
    assert (result.exit_code, result.output) == (
        1,
        "Error: invalid configuration: study.parameters.n_hidden: no hyperparameter 'n_hidden': the model "
        "trainer.model:build_model declares dropout (float), hidden_units (int), filters (int), image_size (int); "
        f"{OWN}\n",
    )
    assert not Path(tmp_path / "run").exists()


def test_the_model_guides_builder_declares_what_its_config_tunes_and_its_error_line_is_the_loaders():
    """docs/guides/model.md: its builder (`# models/my_cnn.py`) builds a model the trainer takes, the config snippet
    that tunes its own n_blocks loads, and the refusal it shows is the loader's."""
    import yaml

    from tests.helpers.doc_checks import doc_builders, load_doc

    doc_builders()
    doc = load_doc("docs/guides/model.md")
    (snippet,) = [b.text for b in doc.blocks if b.language == "yaml" and "study:" in b.text]
    config = yaml.safe_load(snippet)
    (shown,) = [b.text for b in doc.blocks if b.text.startswith("Error: invalid configuration")]
    sets = [f"trainer.model={config['trainer']['model']}", f"study.parameters={config['study']['parameters']}"]
    loaded = load_config(None, sets=sets, environ={})
    assert [p.parameter_id for p in loaded.study.parameters] == ["n_blocks", "learning_rate"]
    with pytest.raises(ConfigError) as e:
        load_config(None, sets=[sets[0], STUDY % ("n_hidden", "integer", "min: 1, max: 3")], environ={})
    assert f"Error: {e.value}" == shown
    stats = {"kind": "image", "input_shape": [8, 8, 1], "labels": [str(i) for i in range(10)]}
    model = builder.load("models.my_cnn:build")(stats, n_blocks=2, activation="selu")
    builder.check(model, stats, "models.my_cnn:build")
    assert len([layer for layer in model.layers if type(layer).__name__ == "Conv2D"]) == 2
