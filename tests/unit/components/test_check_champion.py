"""The champion check after data prep: the prepared data against the champion's labels, features and input."""

import json
import shutil

import pytest

from components.check_champion import champion_identity, check, takes
from components.lib.evaluation import ModelError
from components.prepare_data import prepare

TAIL = (
    ". Publishing this model as its next version would change what its clients get: use another model name for this "
    "data (the model_name parameter; on Vertex AI platform.model_display_name)"
)
DIGITS = [str(i) for i in range(10)]


def stats(data_dir) -> dict:
    return json.loads((data_dir / "stats.json").read_text())


def test_data_like_the_champions_pass(trained_model, digits_data):
    assert check(stats(digits_data), str(trained_model / "model"), "champion v3") == (
        f"champion v3 takes these data: labels {DIGITS}, serving input float32[None, None, None, 1]"
    )
    assert check(stats(digits_data), "", "") == "no champion: nothing to compare with"


def test_other_labels_stop_the_run(trained_model, digits_data, tmp_path):
    relabelled = tmp_path / "relabelled"
    shutil.copytree(trained_model / "model", relabelled)
    (relabelled / "assets.extra" / "labels.txt").write_text("\n".join(f"c{i}" for i in range(10)) + "\n")
    with pytest.raises(ModelError) as error:
        check(stats(digits_data), str(relabelled), "champion v4")
    assert str(error.value) == (
        f"champion v4 is a different model: it has labels {[f'c{i}' for i in range(10)]} (this data: {DIGITS})" + TAIL
    )


def test_another_input_stops_the_run(iris_model, trained_model, digits_data, image_folder_model):
    with pytest.raises(ModelError) as error:
        check(stats(digits_data), str(iris_model / "model"), "champion v2")
    iris_labels = (iris_model / "model" / "assets.extra" / "labels.txt").read_text().split()
    assert str(error.value) == (
        f"champion v2 is a different model: it has labels {iris_labels} (this data: {DIGITS}) and serving input "
        "float32[None, 4] (this data: float32[None, 8, 8, 1])" + TAIL
    )
    _, folder_data, _ = image_folder_model  # RGB cats and dogs at 12 px against a grayscale digits champion
    with pytest.raises(ModelError) as error:
        check(stats(folder_data), str(trained_model / "model"), "v1")
    assert str(error.value).startswith(
        f"v1 is a different model: it has labels {DIGITS} (this data: ['cats', 'dogs']) and serving input "
        "float32[None, None, None, 1] (this data: float32[None, 12, 12, 3])"
    )


def test_other_feature_columns_stop_the_run(iris_model, tmp_path):
    data = tmp_path / "iris"
    prepare("builtin:iris", str(data), num_workers=1, val_fraction=0.2, test_fraction=0.2)
    assert "takes these data" in check(stats(data), str(iris_model / "model"), "v1")
    renamed = tmp_path / "renamed"
    shutil.copytree(iris_model / "model", renamed)
    (renamed / "assets.extra" / "features.txt").write_text("a\nb\nc\nd\n")
    with pytest.raises(ModelError, match=r"it has feature columns \['a', 'b', 'c', 'd'\] \(this data: \['sepal"):
        check(stats(data), str(renamed), "v1")


def test_a_champion_on_cloud_storage(trained_model, digits_data, gcs_emulator):
    from pipelines.rehearsal.gcs import upload

    upload(trained_model / "model", "gs://test-bucket/models/1")
    assert champion_identity("gs://test-bucket/models/1") == {
        "labels": DIGITS,
        "features": None,
        "input": ("float32", [None, None, None, 1]),
    }
    assert "takes these data" in check(stats(digits_data), "gs://test-bucket/models/1/", "v1")
    with pytest.raises(ModelError, match=r"no SavedModel at gs://test-bucket/nothing \(saved_model.pb missing\)"):
        check(stats(digits_data), "gs://test-bucket/nothing", "v1")


@pytest.mark.parametrize(
    "champion, data, fits",
    [
        (("float32", [None, None, None, 1]), ("float32", [None, 8, 8, 1]), True),
        (("float32", [None, 8, 8, 1]), ("float32", [None, 8, 8, 1]), True),
        (("float32", [None, 8, 8, 1]), ("float32", [None, 12, 12, 1]), False),
        (("float32", [None, None, None, 1]), ("float32", [None, 12, 12, 3]), False),
        (("float32", [None, 4]), ("float32", [None, 8, 8, 1]), False),
        (("string", [None]), ("float32", [None]), False),
    ],
)
def test_which_inputs_take_the_data(champion, data, fits):
    assert takes(champion, data) is fits


def test_the_champions_signature_is_read_without_tensorflow(trained_model):
    """The step reads saved_model.pb with TensorBoard's copy of TensorFlow's protos: the same answer as TensorFlow's
    own `SavedModel` message, and no TensorFlow import (seconds of every run that has a champion)."""
    import subprocess
    import sys

    from tensorflow.core.protobuf import saved_model_pb2

    pb = (trained_model / "model" / "saved_model.pb").read_bytes()
    ours = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from components.check_champion import serving_input; "
            f"print(serving_input(open({str(trained_model / 'model' / 'saved_model.pb')!r}, 'rb').read()), "
            "'tensorflow' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    (info,) = saved_model_pb2.SavedModel.FromString(pb).meta_graphs[0].signature_def["serving_default"].inputs.values()
    assert ours == f"('float32', {[None if d.size < 0 else d.size for d in info.tensor_shape.dim]}) False"
