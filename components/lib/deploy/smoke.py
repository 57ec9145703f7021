"""The deploy steps' smoke test: a few test examples and the published SavedModel's own class ids for them, which
the serving endpoint must answer: computed from the published version by the self-hosted deploys (local server, TF
Serving at a URL, KServe), and from the candidate by the evaluation gate, which saves them for the Vertex AI deploy's
check (`write_checks`, `read_checks`: no TensorFlow needed to read them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

SMOKE_EXAMPLES = 8


class SmokeFailed(RuntimeError):
    """The endpoint answered differently from the published model, or not at all."""


@dataclass(frozen=True)
class SmokeResult:
    """One signature's class ids as the endpoint served them (equal to the published model's)."""

    signature: str
    class_ids: list[int]


def smoke_record(results: list[SmokeResult]) -> dict:
    """A deploy record's `smoke`: the first signature's examples, class ids and name, and every signature checked."""
    first = results[0]
    return {
        "examples": len(first.class_ids),
        "class_ids": first.class_ids,
        "signature_name": first.signature,
        "signatures": [r.signature for r in results],
    }


class SmokeCheck(NamedTuple):
    """One signature's examples and the class ids the published model gives them."""

    signature: str
    examples: Any  # numpy array: float rows, or PNG bytes (dtype object) for `serving_image_bytes`
    class_ids: Any  # numpy array of ints

    def instances(self) -> list:
        """The examples as JSON instances: bytes as `{"b64": ...}` (TF Serving's and Vertex's binary form)."""
        import base64

        if self.examples.dtype == object:
            return [{"b64": base64.b64encode(b).decode()} for b in self.examples]
        return self.examples.tolist()

    def compare(self, body: dict) -> SmokeResult:
        """The served answer (`{"predictions": [{"class_id": ...}, ...]}`) against the published model's."""
        import numpy as np

        try:
            served = np.array([p["class_id"] for p in body["predictions"]])
        except (KeyError, TypeError):
            raise SmokeFailed(f"smoke prediction on {self.signature} has no class_id: {str(body)[:200]}") from None
        if not np.array_equal(served, self.class_ids):
            raise SmokeFailed(
                f"smoke prediction on {self.signature} disagrees with the published model: {served} vs {self.class_ids}"
            )
        return SmokeResult(self.signature, served.tolist())


def reference_checks(version_path: str, data_dir: str) -> list[SmokeCheck]:
    """`serving_checks` of the SavedModel at `version_path`."""
    import tensorflow as tf

    return serving_checks(tf.saved_model.load(version_path).signatures, data_dir)


def serving_checks(signatures, data_dir: str) -> list[SmokeCheck]:
    """`serving_default` on the test split's first examples (pixel arrays or feature vectors) and, for image models,
    `serving_image_bytes` on the same images PNG-encoded, with the class ids of a loaded SavedModel's `signatures`."""
    import numpy as np
    import tensorflow as tf

    from trainer import data

    stats = data.load_stats(data_dir)
    inputs, _ = next(iter(data.make_dataset(data_dir, "test", stats, SMOKE_EXAMPLES, training=False)))
    batch = tf.cast(inputs, tf.float32).numpy()
    signature = signatures["serving_default"]
    outputs = signature(**{name: tf.constant(batch) for name in signature.structured_input_signature[1]})
    if "class_id" not in outputs:
        raise SmokeFailed(f"the model's serving_default has no class_id output ({sorted(outputs)})")
    checks = [SmokeCheck("serving_default", batch, outputs["class_id"].numpy())]
    if data.IMAGE_BYTES_SIGNATURE in signatures and stats["kind"] == data.IMAGE:
        encoded = np.array([tf.io.encode_png(image).numpy() for image in inputs], dtype=object)
        answer = signatures[data.IMAGE_BYTES_SIGNATURE](**{data.IMAGE_BYTES_INPUT: tf.constant(encoded)})
        checks.append(SmokeCheck(data.IMAGE_BYTES_SIGNATURE, encoded, answer["class_id"].numpy()))
    return checks


def write_checks(checks: list[SmokeCheck], path: str) -> None:
    """Save smoke checks as JSON that numpy alone reads back exactly (`read_checks`): `{"checks": [{"signature",
    "class_ids": [int, ...], "examples"}, ...]}`, the examples either `{"dtype": numpy's dtype string, "shape",
    "base64": the array's bytes}` or, for byte strings, `{"dtype": "bytes", "base64": [one per example]}`."""
    import base64
    import json

    def examples(array) -> dict:
        if array.dtype == object:
            return {"dtype": "bytes", "base64": [base64.b64encode(b).decode() for b in array]}
        return {
            "dtype": array.dtype.str,
            "shape": list(array.shape),
            "base64": base64.b64encode(array.tobytes()).decode(),
        }

    record = [
        {"signature": c.signature, "class_ids": [int(i) for i in c.class_ids], "examples": examples(c.examples)}
        for c in checks
    ]
    with open(path, "w") as f:
        json.dump({"checks": record}, f)


def read_checks(path: str) -> list[SmokeCheck]:
    """The smoke checks `write_checks` saved at `path`."""
    import base64
    import json

    import numpy as np

    def examples(saved: dict):
        if saved["dtype"] == "bytes":
            return np.array([base64.b64decode(b) for b in saved["base64"]], dtype=object)
        return np.frombuffer(base64.b64decode(saved["base64"]), np.dtype(saved["dtype"])).reshape(saved["shape"])

    with open(path) as f:
        record = json.load(f)
    return [SmokeCheck(c["signature"], examples(c["examples"]), np.array(c["class_ids"])) for c in record["checks"]]
