"""TF Serving's REST API (g3doc/api_rest.md) plus Vertex AI's custom-container health and predict routes, as a
Starlette ASGI app. Every error is `{"error": "<message>"}` with a 4xx status for client errors; a model name in a
path that is no model name (core.names: one path segment) is a 400, before any look-up."""

from __future__ import annotations

import re

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from core.names import InvalidName, model_name
from serving import codec
from serving.dispatch import Dispatcher
from serving.models import NotFound, VersionStatus
from serving.repository import ServedModels

MODEL_PATH = re.compile(
    r"^(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<action>:predict|:classify|:regress|/metadata)?$"
)


class ClientError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _json(payload, status: int = 200) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def status_json(statuses: list[VersionStatus]) -> dict:
    return {
        "model_version_status": [
            {
                "version": str(s.version),
                "state": s.state,
                "status": {"error_code": s.error_code, "error_message": s.error_message},
            }
            for s in statuses
        ]
    }


async def read_json(request: Request, max_bytes: int):
    """The request body as JSON, refusing bodies over `max_bytes` before reading them whole."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise ClientError(413, f"request body of {declared} bytes exceeds the {max_bytes}-byte limit")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise ClientError(413, f"request body exceeds the {max_bytes}-byte limit")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ClientError(400, f"JSON Parse error: {e}") from None


def create_app(
    models: ServedModels,
    dispatcher: Dispatcher,
    max_request_bytes: int = 1_500_000,
    health_route: str = "/health",
    predict_route: str = "/predict",
    deployed_model_id: str = "",
) -> Starlette:
    async def predict(servable, body: dict, how: str = '"signature_name": "{}"') -> tuple[dict, bool]:
        inputs = servable.signature(body.get("signature_name", ""))
        try:
            arrays, row_format = codec.parse_request(body, inputs)
        except codec.RequestError as e:
            raise _with_signature_hint(e, servable, how) from None
        return await dispatcher.predict(servable, arrays, body.get("signature_name", "")), row_format

    async def model_api(request: Request) -> Response:
        match = MODEL_PATH.match(request.path_params["path"])
        if not match:
            return _error(404, f"Malformed request: {request.method} {request.url.path}")
        name, label, action = match["name"], match["label"], match["action"]
        try:
            model_name(name, "model name")
        except InvalidName as e:
            return _error(400, str(e))
        try:
            version = int(match["version"]) if match["version"] is not None else None
        except ValueError:
            return _error(400, f"Failed to convert version: {match['version']} to numeric.")
        if request.method == "GET" and action is None:
            return await _answer(lambda: status_json(models.status(name, version, label)))
        if request.method == "GET" and action == "/metadata":
            return await _answer(lambda: metadata_json(models.resolve(name, version, label), name))
        if request.method == "POST" and action == ":predict":

            async def respond():
                body = await read_json(request, max_request_bytes)
                if not isinstance(body, dict):
                    raise codec.RequestError("the request body must be a JSON object")
                outputs, row_format = await predict(models.resolve(name, version, label), body)
                return {"predictions": codec.rows(outputs)} if row_format else {"outputs": codec.columns(outputs)}

            return await _answer(respond)
        if action in (":classify", ":regress"):
            return _error(400, f"{action[1:]} is not supported by this server; use :predict")
        return _error(405, f"Method {request.method} not allowed for {request.url.path}")

    async def health(request: Request) -> Response:
        return _json({}) if models.ready() else _error(503, "not every model has a version loaded yet")

    async def vertex_predict(request: Request) -> Response:
        async def respond():
            body = await read_json(request, max_request_bytes)
            if not isinstance(body, dict) or "instances" not in body:
                raise codec.RequestError("the request body must be a JSON object with 'instances'")
            parameters = body.get("parameters") or {}  # Vertex passes a batch job's model_parameters here
            if not isinstance(parameters, dict) or not isinstance(parameters.get("signature_name", ""), str):
                raise codec.RequestError("'parameters' must be an object; its 'signature_name' a string")
            outputs, _ = await predict(
                models.resolve(_single_model(models, predict_route)),
                {"instances": body["instances"], "signature_name": parameters.get("signature_name", "")},
                how='"parameters": {{"signature_name": "{}"}}',
            )
            return {"predictions": codec.rows(outputs), "deployedModelId": deployed_model_id}

        return await _answer(respond, not_found=503)  # Vertex: no model loaded yet = unavailable

    return Starlette(
        # the container's own routes first: on KServe they are /v1/models/NAME[:predict], which TF Serving's
        # pattern would otherwise take (and answer for a model NAME the repository does not have)
        routes=[
            Route(health_route, health, methods=["GET"]),
            Route(predict_route, vertex_predict, methods=["POST"]),
            Route("/v1/models/{path:path}", model_api, methods=["GET", "POST"]),
        ],
        exception_handlers={
            404: lambda r, e: _error(404, f"Not found: {r.url.path}"),
            405: lambda r, e: _error(405, f"Method {r.method} not allowed for {r.url.path}"),
        },
    )


def _single_model(models: ServedModels, route: str) -> str:
    """The model the Vertex predict route answers for: the server's only one."""
    names = models.names()
    if len(names) > 1:
        raise ClientError(
            404,
            f"{route} answers for a single model; this server serves {', '.join(names)}: use /v1/models/NAME:predict",
        )
    if not names:
        raise NotFound("no model is served yet")
    return names[0]


def _with_signature_hint(error: codec.RequestError, servable, how: str) -> codec.RequestError:
    """`error`, naming the model's signatures that take strings when `{"b64": ...}` values met a numeric input
    (e.g. encoded images sent to an image model's `serving_default`, which takes pixel arrays)."""
    if "b64 objects need a string input" not in str(error):
        return error
    names = sorted(
        n for n, inputs in servable.inputs.items() if inputs and all(i.dtype == object for i in inputs.values())
    )
    if not names:
        return error
    return codec.RequestError(
        f"{error}; this model takes encoded bytes on signature {names[0]!r}: send " + how.format(names[0])
    )


async def _answer(handler, not_found: int = 404) -> Response:
    """`handler()`'s payload as JSON (awaited when it is a coroutine), or the error response its exception means:
    client errors 4xx, model failures 400 (bad values the signature checks could not see) or 500."""
    import inspect

    import tensorflow as tf

    try:
        payload = handler()
        return _json(await payload if inspect.isawaitable(payload) else payload)
    except ClientError as e:
        return _error(e.status, str(e))
    except NotFound as e:
        return _error(not_found, str(e))
    except codec.RequestError as e:
        return _error(400, str(e))
    except Exception as e:  # noqa: BLE001
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        return _error(400 if isinstance(e, (tf.errors.InvalidArgumentError, ValueError, TypeError)) else 500, message)


def metadata_json(servable, name: str) -> dict:
    from google.protobuf import json_format

    signature_def = json_format.MessageToDict(servable.signature_defs, preserving_proto_field_name=True)
    return {
        "model_spec": {"name": name, "signature_name": "", "version": str(servable.version)},
        "metadata": {"signature_def": signature_def},
    }
