"""A small client for TF Serving's REST and gRPC APIs (this project's server or `tensorflow/serving`), returning
numpy arrays. Errors raise `PredictionError` with the server's message."""

from __future__ import annotations

import numpy as np

from serving.tls import ClientTls

MAX_MESSAGE_BYTES = 2**31 - 1  # grpcio's default receive limit is 4 MB


class PredictionError(RuntimeError):
    def __init__(self, message: str, status: int | str):
        super().__init__(f"{message} ({status})")
        self.message, self.status = message, status


def _json_value(value):
    """An array as TF Serving's REST JSON: nested lists, bytes as `{"b64": ...}`."""
    import base64

    array = np.asarray(value)
    if array.dtype.kind in "OS":
        return np.vectorize(lambda b: {"b64": base64.b64encode(b).decode()}, otypes=[object])(array).tolist()
    return array.tolist()


class ServingClient:
    """`ServingClient("http://127.0.0.1:8501", "127.0.0.1:8500", "my-model").predict(images)`; with `tls`, gRPC
    over TLS and an https `rest_url` checked against its CA (and a client certificate presented, when given)."""

    def __init__(
        self,
        rest_url: str = "",
        grpc_target: str = "",
        model_name: str = "",
        timeout: float = 30.0,
        tls: ClientTls | None = None,
    ):
        import requests

        self.rest_url, self.grpc_target, self.model_name, self.timeout = (
            rest_url.rstrip("/"),
            grpc_target,
            model_name,
            timeout,
        )
        self._session = requests.Session()
        self.tls = tls
        # per request: a session's own `verify` loses to $REQUESTS_CA_BUNDLE (requests#3829)
        self._tls_options = tls.requests_options() if tls else {}
        self._channel = None
        self._outputs: dict[tuple, list[str]] = {}
        self._inputs: dict[tuple, str] = {}

    def _path(self, version: int | None, label: str | None) -> str:
        path = f"{self.rest_url}/v1/models/{self.model_name}"
        return path + (f"/versions/{version}" if version is not None else f"/labels/{label}" if label else "")

    def _rest(self, method: str, url: str, **kwargs) -> dict:
        import requests

        try:
            response = self._session.request(method, url, timeout=self.timeout, **self._tls_options, **kwargs)
        except requests.RequestException as e:
            raise PredictionError(f"cannot reach {url}: {e}", "UNAVAILABLE") from None
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:500]}
        if response.status_code != 200:
            raise PredictionError(body.get("error", response.reason), response.status_code)
        return body

    def status(self, version: int | None = None, label: str | None = None) -> list[dict]:
        return self._rest("GET", self._path(version, label))["model_version_status"]

    def metadata(self, version: int | None = None, label: str | None = None) -> dict:
        return self._rest("GET", self._path(version, label) + "/metadata")

    def predict(
        self,
        inputs,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str = "serving_default",
        protocol: str = "rest",
    ) -> dict[str, np.ndarray]:
        """Predict on a batch: `inputs` is an array (one-input signatures) or {input name: array}."""
        if protocol == "grpc":
            return self._predict_grpc(inputs, version, label, signature_name)
        if protocol != "rest":
            raise ValueError(f"protocol must be 'rest' or 'grpc', got {protocol!r}")
        if isinstance(inputs, dict):
            payload = {k: _json_value(v) for k, v in inputs.items()}
        else:
            payload = _json_value(inputs)
        body = self._rest(
            "POST", self._path(version, label) + ":predict", json={"signature_name": signature_name, "inputs": payload}
        )
        outputs = body["outputs"]
        if not isinstance(outputs, dict):
            outputs = {self._output_names(version, label, signature_name)[0]: outputs}
        return {k: np.asarray(v) for k, v in outputs.items()}

    def _output_names(self, version, label, signature_name) -> list[str]:
        key = (version, label, signature_name)
        if key not in self._outputs:
            signatures = self.metadata(version, label)["metadata"]["signature_def"]["signature_def"]
            self._outputs[key] = sorted(signatures[signature_name]["outputs"])
        return self._outputs[key]

    def _predict_grpc(self, inputs, version, label, signature_name) -> dict[str, np.ndarray]:
        import grpc
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        from serving import tensors

        if self._channel is None:
            options = [
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ]
            self._channel = (
                grpc.secure_channel(self.grpc_target, self.tls.grpc_credentials(), options)
                if self.tls
                else grpc.insecure_channel(self.grpc_target, options)
            )
            self._stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        request = predict_pb2.PredictRequest()
        self._spec(request.model_spec, version, label)
        request.model_spec.signature_name = signature_name
        try:
            if not isinstance(inputs, dict):
                inputs = {self._input_name(version, label, signature_name): inputs}
            for name, value in inputs.items():
                tensors.fill(request.inputs[name], value)
            response = self._stub.Predict(request, self.timeout)
        except grpc.RpcError as e:
            raise PredictionError(e.details(), e.code().name) from None
        return {k: tensors.to_array(v) for k, v in response.outputs.items()}

    def _spec(self, model_spec, version, label) -> None:
        model_spec.name = self.model_name
        if version is not None:
            model_spec.version.value = version
        elif label:
            model_spec.version_label = label

    def _input_name(self, version, label, signature_name) -> str:
        """The signature's only input (GetModelMetadata, asked once per version/label/signature)."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        key = (version, label, signature_name)
        if key not in self._inputs:
            request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
            self._spec(request.model_spec, version, label)
            signatures = get_model_metadata_pb2.SignatureDefMap()
            self._stub.GetModelMetadata(request, self.timeout).metadata["signature_def"].Unpack(signatures)
            names = sorted(signatures.signature_def[signature_name].inputs)
            if len(names) != 1:
                raise ValueError(f"the signature has inputs {names}; pass a dict")
            self._inputs[key] = names[0]
        return self._inputs[key]

    def close(self) -> None:
        self._session.close()
        if self._channel is not None:
            self._channel.close()
