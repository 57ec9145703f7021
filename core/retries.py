"""The one retry policy of the project's own calls to Vertex AI, Cloud Storage and Dataflow: google-api-core's
`Retry`, exponential backoff (`INITIAL` seconds doubling up to `MAXIMUM`) until `DEADLINE` seconds have passed, then
`google.api_core.exceptions.RetryError` naming the last error.

What is retried:
- `transient`: 429 (TooManyRequests; gRPC RESOURCE_EXHAUSTED, Vertex's quota answer) and 503 (ServiceUnavailable;
  gRPC UNAVAILABLE, also how gRPC reports a reset connection): the service refused the request without acting on it.
- `transient_idempotent`: those, 500, 502 and 504 (DEADLINE_EXCEEDED), and connection resets over HTTP (requests',
  urllib3's and the built-in ConnectionError, a resumable upload's InvalidResponse with those statuses): the request
  may have been acted on, so only calls whose repeat leaves the same state take them.

Which calls (`policy(idempotent=...)`):
- idempotent: the steps' Get and List calls (registry look-ups, endpoint state, tuning and batch jobs), the CLI's
  ListSchedules (aiplatform's SDK repeats its own Get calls, the pipeline job's state among them),
  UpdateEndpoint's traffic split and MergeVersionAliases (they set a value), Cloud Storage reads, listings, deletes
  (a repeat that finds the object gone: deleted) and uploads (`core.storage.open_write`'s resumable ones resend a
  chunk in their session; the objects written are the writer's alone, the pre-flight probe's name is unique);
- refused only (`idempotent=False`): UndeployModel (a repeat after it acted finds the deployed model gone), and
  the upload of a new version of the model another run created (components.lib.vertex.create);
- idempotent as well: the creation of the registry model and the endpoint with their own IDs (a repeat after it
  acted gets ALREADY_EXISTS, which takes the resource made);
- not retried: the creates a repeat would double, which fail at once with the service's error: the pipeline job
  (`submit`), a schedule, and the schedule's pause, resume and delete; GCPC's launchers' uploads, endpoints and
  deploys are GCPC's own calls; a Dataflow job is created and watched by Beam's client, with retries of its own (a
  step whose wait gives up cancels the job: components.lib.prep.dataflow).
"""

from __future__ import annotations

INITIAL = 1.0  # seconds before the first retry
MAXIMUM = 32.0  # seconds between retries at most
MULTIPLIER = 2.0
DEADLINE = 300.0  # seconds from the first try after which the call gives up

REFUSED_STATUS = (429, 503)
IDEMPOTENT_STATUS = (*REFUSED_STATUS, 500, 502, 504)


def _status(error: BaseException) -> int | None:
    """The HTTP status an error carries: google-api-core's `code`, or a storage `InvalidResponse`'s response."""
    from google.api_core import exceptions

    if isinstance(error, exceptions.GoogleAPICallError):
        return error.code
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _connection_error(error: BaseException) -> bool:
    import requests
    import urllib3

    return isinstance(
        error,
        (
            ConnectionError,
            requests.exceptions.ConnectionError,
            requests.exceptions.ChunkedEncodingError,
            urllib3.exceptions.ProtocolError,
        ),
    )


def _cause(error: BaseException) -> BaseException:
    """The error google-auth's TransportError wraps (a reset while refreshing a token), else the error."""
    from google.auth.exceptions import TransportError

    if isinstance(error, TransportError) and error.args and isinstance(error.args[0], BaseException):
        return error.args[0]
    return error


def transient(error: BaseException) -> bool:
    """A refusal any call may repeat: 429 or 503."""
    return _status(_cause(error)) in REFUSED_STATUS


def transient_idempotent(error: BaseException) -> bool:
    """A failure an idempotent call may repeat: 429, 500, 502, 503, 504 or a reset connection."""
    error = _cause(error)
    return _status(error) in IDEMPOTENT_STATUS or _connection_error(error)


def _note(error: BaseException) -> None:
    first = (str(error).splitlines() or [""])[0]
    print(f"retrying after a transient error: {type(error).__name__}: {first}")


def policy(idempotent: bool = True):
    """The `retry=` of a call (GAPIC methods, google-cloud-storage calls), or a decorator of one (`policy()(f)()`)."""
    from google.api_core.retry import Retry

    return Retry(
        predicate=transient_idempotent if idempotent else transient,
        initial=INITIAL,
        maximum=MAXIMUM,
        multiplier=MULTIPLIER,
        timeout=DEADLINE,
        on_error=_note,
    )
