"""Which signature of a SavedModel a batch job calls, and the feature columns the model was trained on, read without
loading the model."""

from components.lib.batch.instance_formats import B64_FORMATS
from components.lib.batch.instances import Files


def _takes_strings(inputs: dict) -> bool:
    """Whether a signature's inputs ({name: is a string input}) all take strings (e.g. `{"b64": ...}` values)."""
    return bool(inputs) and all(inputs.values())


def choose_signature(signatures: dict[str, dict[str, bool]], signature_name: str, instances_format: str) -> str:
    """The signature a batch job calls: `signature_name` when given (it must exist), else `serving_default`, except
    for records that reach the model as `{"b64": ...}` (file-list, tf-record) when `serving_default` takes no
    strings and the model has an encoded-image signature (`serving_image_bytes`, image models of this trainer): a
    file list of images is predicted from the files' bytes. `signatures`: {name: {input: is a string input}}."""
    from core.schema import IMAGE_BYTES_SIGNATURE

    if signature_name:
        if signatures and signature_name not in signatures:
            raise ValueError(f"the model has no signature {signature_name!r}; available: {sorted(signatures)}")
        return signature_name
    if (
        instances_format in B64_FORMATS
        and IMAGE_BYTES_SIGNATURE in signatures
        and not _takes_strings(signatures.get("serving_default", {}))
    ):
        return IMAGE_BYTES_SIGNATURE
    return "serving_default"


def model_signatures(model_uri: str) -> dict[str, dict[str, bool]]:
    """{signature: {input: is a string input}} of the SavedModel at `model_uri` (local or gs://), read from its
    `saved_model.pb` without loading the model; {} when it cannot be read."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    try:
        proto = saved_model_pb2.SavedModel.FromString(Files().read(f"{model_uri.rstrip('/')}/saved_model.pb"))
    except Exception as e:  # noqa: BLE001 (missing, unreadable or not a SavedModel: the default signature applies)
        print(f"cannot read the signatures of {model_uri}: {str(e)[:200]}")
        return {}
    if not proto.meta_graphs:
        return {}
    return {
        name: {key: info.dtype == types_pb2.DT_STRING for key, info in signature.inputs.items()}
        for name, signature in proto.meta_graphs[0].signature_def.items()
    }


def model_feature_names(model_uri: str) -> list[str]:
    """The feature column names a model was trained on (`assets.extra/features.txt` in its directory, local or
    gs://); [] when it names none (image models, models from elsewhere)."""
    from core.schema import FEATURES_FILE

    path = f"{model_uri.rstrip('/')}/{FEATURES_FILE}"
    try:
        text = Files().read(path).decode("utf-8")
    except FileNotFoundError:
        return []
    except Exception as e:  # noqa: BLE001 (google.api_core NotFound on gs://, without importing it here)
        if type(e).__name__ == "NotFound":
            return []
        raise
    return [line.strip() for line in text.splitlines() if line.strip()]
