"""The champion check right after data prep: a run whose data has other labels, other feature columns or another
input shape than the champion of its model name stops here, before the study and the training, with the gate's
message (`components.lib.evaluation.check_compatible`, which checks the trained model again, input names and signatures too).
Then the data drift check (`components.lib.drift`): the data's profile against the one the champion carries, written
to the `drift` artifact first, so that the report shows it whatever stops the run.

The champion's side is read from its artifacts without loading the model or importing TensorFlow: the labels and
feature files the trainer writes beside the SavedModel and the `serving_default` input of `saved_model.pb`; the
candidate's from the prepared data's `stats.json` (examples of float32 `[None, *input_shape]`, which the champion's
input must take: the same rank and channels, any size where it takes any).
"""

import functools

from kfp.dsl import Artifact, Dataset, Input, Output

from core.schema import FEATURES_FILE, LABELS_FILE, PROFILE_FILE


def _lines(data: bytes | None) -> list[str] | None:
    return None if data is None else [line for line in data.decode().splitlines() if line]


@functools.cache
def _saved_model_class():
    """TensorFlow's `SavedModel` message (saved_model.proto: a schema version and the meta graphs) over TensorBoard's
    copy of TensorFlow's `MetaGraphDef`: reading a signature this way spares the step TensorFlow's import."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from tensorboard.compat.proto import meta_graph_pb2

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="tfpipe/saved_model.proto", package="tfpipe", syntax="proto3", dependency=[meta_graph_pb2.DESCRIPTOR.name]
    )
    message = file.message_type.add(name="SavedModel")
    message.field.add(name="saved_model_schema_version", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    message.field.add(
        name="meta_graphs",
        number=2,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_REPEATED,
        type_name=".tensorboard.MetaGraphDef",
    )
    pool = descriptor_pool.Default()
    pool.AddSerializedFile(file.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tfpipe.SavedModel"))


def serving_input(saved_model_pb: bytes) -> tuple[str, list]:
    """(dtype, shape) of the `serving_default` signature's input in a `saved_model.pb` (None for any size)."""
    from tensorboard.compat.tensorflow_stub import dtypes

    model = _saved_model_class().FromString(saved_model_pb)
    for graph in model.meta_graphs:
        signature = graph.signature_def.get("serving_default")
        if signature is not None and signature.inputs:
            (info,) = signature.inputs.values()
            dims = [None if d.size < 0 else d.size for d in info.tensor_shape.dim]
            return dtypes.as_dtype(info.dtype).name, dims
    raise ValueError("the champion's saved_model.pb has no serving_default signature with an input")


def champion_identity(champion_path: str) -> dict:
    """The champion's labels and feature columns (None without their files) and its serving input."""
    from components.lib.evaluation import ModelError
    from core.storage import read_bytes

    root = champion_path.rstrip("/")
    saved_model = read_bytes(f"{root}/saved_model.pb")
    if saved_model is None:
        raise ModelError(f"no SavedModel at {champion_path} (saved_model.pb missing)")
    try:
        serving = serving_input(saved_model)
    except ValueError as e:
        raise ModelError(str(e)) from None
    return {
        "labels": _lines(read_bytes(f"{root}/{LABELS_FILE}")),
        "features": _lines(read_bytes(f"{root}/{FEATURES_FILE}")),
        "input": serving,
    }


def data_identity(stats: dict) -> dict:
    """What the model trained on these data will answer and take: labels, feature columns, serving input."""
    return {
        "labels": stats["labels"],
        "features": stats.get("feature_names") or None,
        "input": ("float32", [None, *stats["input_shape"]]),
    }


def takes(champion_input: tuple[str, list], data_input: tuple[str, list]) -> bool:
    """Whether a serving input takes the data's examples: the same dtype and rank, each size equal or any."""
    (dtype, shape), (data_dtype, data_shape) = champion_input, data_input
    return (
        dtype == data_dtype
        and len(shape) == len(data_shape)
        and all(a is None or b is None or a == b for a, b in zip(shape, data_shape))
    )


def _spec(value: tuple[str, list]) -> str:
    return f"{value[0]}{value[1]}"


def check(stats: dict, champion_path: str, champion_name: str) -> str:
    """ModelError (the gate's message) when the data do not fit the champion; else what was compared."""
    from components.lib.evaluation import different_model

    if not champion_path:
        return "no champion: nothing to compare with"
    name = champion_name or "the champion"
    theirs, ours = champion_identity(champion_path), data_identity(stats)
    problems = []
    if theirs["labels"] is not None and theirs["labels"] != ours["labels"]:
        problems.append(f"labels {theirs['labels']} (this data: {ours['labels']})")
    if theirs["features"] is not None and ours["features"] is not None and theirs["features"] != ours["features"]:
        problems.append(f"feature columns {theirs['features']} (this data: {ours['features']})")
    if not takes(theirs["input"], ours["input"]):
        problems.append(f"serving input {_spec(theirs['input'])} (this data: {_spec(ours['input'])})")
    if problems:
        raise different_model(name, problems)
    return f"{name} takes these data: labels {ours['labels']}, serving input {_spec(theirs['input'])}"


def compare_profiles(stats: dict, champion_path: str, champion_name: str, limits) -> dict:
    """The drift artifact (`components.lib.drift.compare`) of the data against the champion's training data; a
    comparison not made when there is no champion or it carries no profile."""
    import json

    from components.lib.drift import compare, not_compared
    from core.storage import read_bytes

    if not champion_path:
        return not_compared("no champion: no data drift check")
    profile = read_bytes(f"{champion_path.rstrip('/')}/{PROFILE_FILE}")
    if profile is None:
        return not_compared(
            f"{champion_name or 'the champion'} carries no profile of its training data ({PROFILE_FILE}: versions "
            "trained before the data drift check): no data drift check"
        )
    return compare(json.loads(profile), stats["profile"], limits)


def check_champion(
    dataset: Input[Dataset],
    champion_path: str,
    champion_name: str,
    drift_max_class_distance: float,
    drift_max_js_divergence: float,
    drift_action: str,
    drift: Output[Artifact],
):
    """KFP step: stop the run before the study when the prepared data do not fit the champion of the model name,
    or drifted from its training data past the limits (and `drift_action` is stop).

    Args:
        dataset: The prepared data (stats.json: labels, feature columns, input shape, profile).
        champion_path: The champion's SavedModel (empty: no champion).
        champion_name: The champion's name in the message.
        drift_max_class_distance: The largest L-infinity distance accepted between the class distributions.
        drift_max_js_divergence: The largest Jensen-Shannon divergence accepted for a numeric feature or the image sizes.
        drift_action: stop (the run fails) or warn (it goes on) when the data drifted past a limit.
        drift: The comparison (JSON), for the report.
    """
    import json
    import os

    from components.check_champion import check, compare_profiles
    from components.lib.drift import DriftLimits, class_changes, verdict

    with open(os.path.join(dataset.path, "stats.json")) as f:
        stats = json.load(f)
    limits = DriftLimits(drift_max_class_distance, drift_max_js_divergence, drift_action)
    found = compare_profiles(stats, champion_path, champion_name, limits)
    with open(drift.path, "w") as f:
        json.dump(found, f, indent=2)
    for line in class_changes(found, champion_name):
        print(line)
    print(check(stats, champion_path, champion_name))
    print(verdict(found, champion_name))
