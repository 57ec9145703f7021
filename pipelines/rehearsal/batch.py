"""A batch prediction job as Vertex AI runs one for a model with a custom container, for the double.

The model's serving container runs on a copy of its artifacts (`api/job_service.py` starts it, as for a
deployment). Each input file's records become instances as Vertex converts them (`batch_input.py`, with the job's
instance config), not as the self-hosted batch step reads them; `batch_size` of them go to the container's predict
route per request, with the job's `model_parameters` as `parameters`, and the answers are written in Vertex's layout
(`prediction-MODEL-TIME/prediction.results-*` and `prediction.errors_stats-*`). A request the container refuses fails
its batch's instances with the container's message; a record that makes no instance fails alone.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import orjson
import requests

from components.lib.batch.instances import Files, Item
from components.lib.batch.outputs import INTERNAL, INVALID_ARGUMENT, Shard, shard_uri, valid_batches
from pipelines.rehearsal.batch_input import VertexInstanceConfig, vertex_instances

FILES_AT_ONCE = 4  # input files read and sent concurrently
REQUEST_TIMEOUT = 600  # seconds


def _answer(response: requests.Response, count: int) -> tuple[list | None, int, str]:
    """(predictions, error code, message) of the container's answer to a request of `count` instances."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code != 200:
        message = body.get("error") if isinstance(body, dict) else None
        message = message.get("message") if isinstance(message, dict) else message
        code = INVALID_ARGUMENT if 400 <= response.status_code < 500 else INTERNAL
        return None, code, f"HTTP {response.status_code}: {message or response.text[:500]}"
    predictions = body.get("predictions") if isinstance(body, dict) else None
    if not isinstance(predictions, list) or len(predictions) != count:
        found = len(predictions) if isinstance(predictions, list) else "no"
        return None, INTERNAL, f"the container answered {found} predictions for {count} instances"
    return predictions, 0, ""


def _send(session: requests.Session, url: str, batch: list[Item], parameters: dict, shard: Shard) -> None:
    body = {"instances": [item.instance for item in batch], **({"parameters": parameters} if parameters else {})}
    try:
        response = session.post(
            url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}, timeout=REQUEST_TIMEOUT
        )
    except requests.RequestException as e:
        for item in batch:
            shard.error(item, INTERNAL, f"the container did not answer: {e}")
        return
    predictions, code, message = _answer(response, len(batch))
    if predictions is None:
        for item in batch:
            shard.error(item, code, message)
        return
    for item, prediction in zip(batch, predictions):
        shard.result(item, prediction)


def _predict_file(
    url: str,
    path: str,
    results: str,
    errors: str,
    instances_format: str,
    config: VertexInstanceConfig,
    batch_size: int,
    parameters: dict,
) -> tuple[int, int]:
    files = Files()
    with (
        requests.Session() as session,
        files.open(results, "wb") as results_file,
        files.open(errors, "wb") as errors_file,
        files.open(path, "rb") as stream,
    ):
        shard = Shard(results_file, errors_file, bool(config.key_field))
        items = vertex_instances(stream, instances_format, config, files)
        for batch in valid_batches(items, batch_size, shard):
            _send(session, url, batch, parameters, shard)
    return shard.succeeded, shard.failed


def predict_files(
    url: str,
    files: list[str],
    instances_format: str,
    config: VertexInstanceConfig,
    batch_size: int,
    parameters: dict,
    output_directory: str,
) -> tuple[int, int]:
    """Predict every instance of `files` through the container's predict `url` into `output_directory` (one results
    and one errors file per input file); returns (succeeded, failed)."""

    def shard(index: int, path: str) -> tuple[int, int]:
        return _predict_file(
            url,
            path,
            shard_uri(output_directory, "results", index, len(files)),
            shard_uri(output_directory, "errors_stats", index, len(files)),
            instances_format,
            config,
            batch_size,
            parameters,
        )

    with ThreadPoolExecutor(min(FILES_AT_ONCE, len(files))) as pool:
        counts = list(pool.map(shard, range(len(files)), files))
    return sum(c[0] for c in counts), sum(c[1] for c in counts)
