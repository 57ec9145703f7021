"""Mixed precision (`--mixed-precision`): the policy set per training, the built-in models' output in float32, a
user model's 16-bit output refused in one line, and the warning for float16 on a CPU."""

import pytest

from trainer import builder, flags
from trainer.task import set_precision

DIGITS = {"kind": "image", "input_shape": [8, 8, 1], "labels": [str(i) for i in range(10)]}
IRIS = {
    "kind": "tabular",
    "input_shape": [4],
    "labels": ["a", "b", "c"],
    "feature_mean": [0.0] * 4,
    "feature_variance": [1.0] * 4,
}
HPARAMS = {"image_size": 0, "filters": 4, "hidden_units": 8, "dropout": 0.0}


@pytest.fixture
def keras():
    import tf_keras

    yield tf_keras
    tf_keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy,compute", [("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")])
def test_built_in_models_compute_in_16_bits_and_output_float32(keras, capsys, policy, compute):
    from trainer.model import build_model

    set_precision(policy, ["/physical_device:GPU:0"])
    assert capsys.readouterr().out == ""
    for stats in (DIGITS, IRIS):
        model = build_model(stats, **HPARAMS)
        builder.check(model, stats, builder.DEFAULT_BUILDER)
        hidden = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)][0]
        assert (hidden.compute_dtype, model.get_layer("probabilities").compute_dtype) == (compute, "float32")
        assert model.outputs[0].dtype.name == "float32"


def test_a_16_bit_output_is_refused_and_none_resets_the_policy(keras, capsys):
    set_precision("mixed_float16", [])
    assert capsys.readouterr().out == (
        "[trainer] warning: --mixed-precision mixed_float16 without a GPU: float16 runs slowly on a CPU\n"
    )
    pixels = keras.Input((8, 8, 1))
    outputs = keras.layers.Dense(10, activation="softmax")(keras.layers.Flatten()(pixels))
    with pytest.raises(builder.BuilderError) as e:
        builder.check(keras.Model(pixels, outputs), DIGITS, "models.mine:build")
    assert str(e.value) == (
        "builder models.mine:build returned a model whose output is float16; the probabilities must be float32: give "
        'the output layer dtype="float32" (mixed precision computes the other layers in 16 bits)'
    )
    set_precision("none", [])
    assert keras.mixed_precision.global_policy().name == "float32"


def test_the_flag_takes_the_three_policies(capsys):
    assert flags.parse_args(["--data-dir", "d", "--job-dir", "j"]).mixed_precision == "none"
    assert (
        flags.parse_args(["--data-dir", "d", "--job-dir", "j", "--mixed_precision=mixed_bfloat16"]).mixed_precision
        == "mixed_bfloat16"
    )
    with pytest.raises(SystemExit):
        flags.parse_args(["--data-dir", "d", "--job-dir", "j", "--mixed-precision", "float16"])
    assert "argument --mixed-precision: invalid choice: 'float16' (choose from" in capsys.readouterr().err
