"""TF Serving's REST JSON encoding of tensors (g3doc/api_rest.md), to and from numpy arrays.

Row format: `"instances"` is a list of examples, each a value (one-input signatures) or an object of named inputs;
columnar format: `"inputs"` is a value or an object of named batched tensors. Binary strings are `{"b64": "..."}`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np


class RequestError(ValueError):
    """The request does not fit the signature (a client error: HTTP 400, gRPC INVALID_ARGUMENT)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: np.dtype  # numpy dtype; object for DT_STRING
    shape: tuple | None  # None for unknown rank; None inside for unknown dimensions


def signature_inputs(fn) -> dict[str, TensorInfo]:
    """Input names, dtypes and shapes of a concrete function (a loaded SavedModel signature)."""
    _, kwargs = fn.structured_input_signature
    return {
        name: TensorInfo(
            name,
            np.dtype(object if spec.dtype.name == "string" else spec.dtype.as_numpy_dtype),
            tuple(spec.shape.as_list()) if spec.shape.rank is not None else None,
        )
        for name, spec in kwargs.items()
    }


def _unb64(value):
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise RequestError(f'unexpected object {sorted(value)} in a tensor value; only {{"b64": ...}} is allowed')
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (ValueError, TypeError):
            raise RequestError('invalid base64 in a "b64" value') from None
    if isinstance(value, list):
        return [_unb64(v) for v in value]
    if isinstance(value, str):
        return value.encode()
    return value


def to_array(value, info: TensorInfo, batched: bool = True) -> np.ndarray:
    """One input's JSON value as an array of the signature's dtype, with its shape checked."""
    try:
        if info.dtype == object:
            array = np.array(_unb64(value), dtype=object)
            if not all(isinstance(v, bytes) for v in array.flat):
                raise RequestError(f"input '{info.name}' takes strings or {{\"b64\": ...}} values")
        else:
            if isinstance(value, dict) or (isinstance(value, list) and _has_dict(value)):
                raise RequestError(f"input '{info.name}' has dtype {info.dtype.name}; b64 objects need a string input")
            array = np.asarray(value, dtype=info.dtype)
    except RequestError:
        raise
    except (ValueError, TypeError, OverflowError) as e:
        raise RequestError(f"input '{info.name}': cannot convert to {info.dtype.name} tensor: {_short(e)}") from None
    if info.shape is not None:
        expected = info.shape if batched else info.shape[1:]
        if array.ndim != len(expected) or any(e is not None and e != a for e, a in zip(expected, array.shape)):
            want = "[" + ",".join("?" if d is None else str(d) for d in expected) + "]"
            raise RequestError(
                f"input '{info.name}' expects shape {want}{' per instance' if not batched else ''}, "
                f"got {list(array.shape)}"
            )
    return array


def check_arrays(arrays: dict, inputs: dict[str, TensorInfo]) -> None:
    """Names, dtypes and shapes of ready arrays against the signature (loaded signatures do not check shapes)."""
    if set(arrays) != set(inputs):
        raise RequestError(f"inputs {sorted(arrays)} do not match the signature inputs {sorted(inputs)}")
    for name, array in arrays.items():
        want = inputs[name]
        if array.dtype != want.dtype and not (want.dtype == object and array.dtype.kind in "OS"):
            raise RequestError(f"input '{name}' expects {want.dtype.name} but {array.dtype.name} is provided")
        if want.shape is not None and (
            array.ndim != len(want.shape) or any(e is not None and e != a for e, a in zip(want.shape, array.shape))
        ):
            raise RequestError(f"input '{name}' expects shape {list(want.shape)}, got {list(array.shape)}")


def _has_dict(value: list) -> bool:
    first = value
    while isinstance(first, list) and first:
        first = first[0]
    return isinstance(first, dict)


def _short(error: Exception) -> str:
    return str(error).split("\n")[0][:200]


def parse_instances(instances, inputs: dict[str, TensorInfo]) -> dict[str, np.ndarray]:
    """Row format → batched arrays. One-input signatures accept bare values or `{name: value}` objects."""
    if not isinstance(instances, list) or not instances:
        raise RequestError("'instances' must be a non-empty list")
    names = list(inputs)
    if all(isinstance(i, dict) and "b64" not in i for i in instances):
        for row in instances:
            if row.keys() != inputs.keys():
                missing, extra = set(names) - set(row), set(row) - set(names)
                raise RequestError(
                    f"instance inputs do not match the signature {names}"
                    + (f"; missing {sorted(missing)}" if missing else "")
                    + (f"; unknown {sorted(extra)}" if extra else "")
                )
        columns = {n: [row[n] for row in instances] for n in names}
    elif len(names) == 1 and not any(isinstance(i, dict) and "b64" not in i for i in instances):
        columns = {names[0]: instances}
    else:
        raise RequestError(
            f"every instance must be an object with the inputs {names}"
            if len(names) > 1
            else "instances must all be values or all be objects"
        )
    arrays = {}
    for name, values in columns.items():
        try:
            arrays[name] = to_array(values, inputs[name])  # one conversion for the whole batch
        except RequestError:
            for value in values:  # name the instance that does not fit
                to_array(value, inputs[name], batched=False)
            raise RequestError(
                f"input '{name}': instances have different shapes; send them in separate requests"
            ) from None
    return arrays


def parse_inputs(value, inputs: dict[str, TensorInfo]) -> dict[str, np.ndarray]:
    """Columnar format → arrays."""
    names = list(inputs)
    if isinstance(value, dict) and "b64" not in value:
        if set(value) != set(names):
            raise RequestError(f"'inputs' must name exactly the signature inputs {names}, got {sorted(value)}")
        arrays = {n: to_array(value[n], inputs[n]) for n in names}
    elif len(names) == 1:
        arrays = {names[0]: to_array(value, inputs[names[0]])}
    else:
        raise RequestError(f"'inputs' must be an object with the inputs {names}")
    sizes = {a.shape[0] if a.ndim else None for a in arrays.values()}
    if len(sizes) > 1:
        raise RequestError(f"inputs have different batch sizes: {sorted(str(s) for s in sizes)}")
    return arrays


def parse_request(body: dict, inputs: dict[str, TensorInfo]) -> tuple[dict[str, np.ndarray], bool]:
    """A predict request body → (arrays, row_format)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if "instances" in body and "inputs" in body:
        raise RequestError("specify either 'instances' (row format) or 'inputs' (columnar format), not both")
    if "instances" in body:
        return parse_instances(body["instances"], inputs), True
    if "inputs" in body:
        return parse_inputs(body["inputs"], inputs), False
    raise RequestError("missing 'instances' or 'inputs' in the request body")


def _jsonable(array: np.ndarray, name: str):
    if array.dtype == object or array.dtype.kind == "S":
        encode = (
            (lambda b: {"b64": base64.b64encode(b).decode()})
            if name.endswith("_bytes")
            else (lambda b: b.decode("utf-8", "replace"))
        )
        return np.vectorize(encode, otypes=[object])(array).tolist() if array.size else array.tolist()
    return array


def rows(outputs: dict[str, np.ndarray]) -> list:
    """Outputs → row-format predictions: values for a single output, else one object per example."""
    if len(outputs) == 1:
        ((name, array),) = outputs.items()
        value = _jsonable(array, name)
        return list(value) if isinstance(value, np.ndarray) else value
    converted = {n: _jsonable(a, n) for n, a in outputs.items()}
    size = len(next(iter(converted.values())))
    return [{n: v[i] for n, v in converted.items()} for i in range(size)]


def columns(outputs: dict[str, np.ndarray]):
    """Outputs → columnar `outputs`: the value for a single output, else an object."""
    if len(outputs) == 1:
        ((name, array),) = outputs.items()
        return _jsonable(array, name)
    return {n: _jsonable(a, n) for n, a in outputs.items()}
