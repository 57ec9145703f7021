"""The retry policy of the project's own cloud calls (core.retries): which errors it repeats, for which calls, and how
long it tries."""

import http.client

import pytest
import requests
import urllib3
from google.api_core import exceptions
from google.api_core.retry import Retry
from google.auth.exceptions import TransportError
from google.cloud.storage.exceptions import InvalidResponse

from core import retries


def response(status: int) -> requests.Response:
    answer = requests.Response()
    answer.status_code = status
    return answer


REFUSED = [  # the service acted on nothing: any call repeats these
    exceptions.TooManyRequests("429 Too Many Requests"),
    exceptions.ResourceExhausted("Quota exceeded for aiplatform.googleapis.com/online_prediction_requests"),
    exceptions.ServiceUnavailable("503 The service is currently unavailable."),
    InvalidResponse(response(503), "upload chunk refused"),
    InvalidResponse(response(429), "rate limited"),
    TransportError(exceptions.ServiceUnavailable("token endpoint unavailable")),
]
MAYBE_DONE = [  # the request may have been acted on: only idempotent calls repeat these
    exceptions.InternalServerError("500 Internal error encountered."),
    exceptions.BadGateway("502 Bad Gateway"),
    exceptions.GatewayTimeout("504 Gateway Timeout"),
    exceptions.DeadlineExceeded("Deadline Exceeded"),
    InvalidResponse(response(500), "server error"),
    ConnectionResetError(104, "Connection reset by peer"),
    requests.exceptions.ConnectionError("('Connection aborted.', RemoteDisconnected('closed'))"),
    requests.exceptions.ChunkedEncodingError("Connection broken: IncompleteRead"),
    urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")),
    TransportError(ConnectionResetError(104, "Connection reset by peer")),
]
NEVER = [  # the request was wrong or not allowed: repeating it changes nothing
    exceptions.BadRequest("400"),
    exceptions.InvalidArgument("invalid ListModelsRequest"),
    exceptions.Unauthorized("401"),
    exceptions.PermissionDenied("Permission 'aiplatform.models.list' denied"),
    exceptions.NotFound("The Endpoint does not exist."),
    exceptions.AlreadyExists("Schedule already exists"),
    exceptions.FailedPrecondition("deployed model 1 still has traffic"),
    exceptions.PreconditionFailed("412 ifGenerationMatch"),
    exceptions.Cancelled("cancelled"),
    InvalidResponse(response(404), "no such upload session"),
    TransportError("no metadata server"),
    http.client.HTTPException("not a connection error"),
    ValueError("bad"),
]


@pytest.mark.parametrize("error", REFUSED, ids=repr)
def test_refusals_are_repeated_by_every_call(error):
    assert retries.transient(error) and retries.transient_idempotent(error)


@pytest.mark.parametrize("error", MAYBE_DONE, ids=repr)
def test_server_errors_and_resets_are_repeated_by_idempotent_calls_only(error):
    assert (retries.transient(error), retries.transient_idempotent(error)) == (False, True)


@pytest.mark.parametrize("error", NEVER, ids=repr)
def test_client_errors_are_never_repeated(error):
    assert (retries.transient(error), retries.transient_idempotent(error)) == (False, False)


def test_the_policy_backs_off_exponentially_until_its_deadline():
    policy = retries.policy()
    assert isinstance(policy, Retry)
    assert (policy._initial, policy._maximum, policy._multiplier, policy._timeout) == (1.0, 32.0, 2.0, 300.0)
    assert policy._predicate is retries.transient_idempotent
    assert retries.policy(idempotent=False)._predicate is retries.transient


def failing(errors: list, result="done"):
    """A call raising `errors` in turn, then returning `result`; its calls counted in `calls`."""
    calls = []

    def call():
        calls.append(len(calls))
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return call, calls


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(retries, "INITIAL", 0.001)
    monkeypatch.setattr(retries, "MAXIMUM", 0.001)


def test_a_call_repeated_after_transient_errors_returns_its_result_and_says_why(fast, capsys):
    call, calls = failing([exceptions.ServiceUnavailable("unavailable"), exceptions.ResourceExhausted("quota")])
    assert retries.policy()(call)() == "done"
    assert calls == [0, 1, 2]
    assert capsys.readouterr().out == (
        "retrying after a transient error: ServiceUnavailable: 503 unavailable\n"
        "retrying after a transient error: ResourceExhausted: 429 quota\n"
    )


def test_a_refused_only_call_is_not_repeated_after_a_server_error(fast):
    call, calls = failing([exceptions.InternalServerError("internal")])
    with pytest.raises(exceptions.InternalServerError):
        retries.policy(idempotent=False)(call)()
    assert calls == [0]


def test_a_client_error_fails_at_once(fast):
    call, calls = failing([exceptions.NotFound("gone")])
    with pytest.raises(exceptions.NotFound):
        retries.policy()(call)()
    assert calls == [0]


def test_a_call_gives_up_at_the_deadline_naming_the_last_error(fast, monkeypatch):
    monkeypatch.setattr(retries, "DEADLINE", 0.05)
    call, calls = failing([exceptions.ServiceUnavailable("still down")] * 10_000)
    with pytest.raises(exceptions.RetryError) as raised:
        retries.policy()(call)()
    assert isinstance(raised.value.cause, exceptions.ServiceUnavailable)
    assert 1 < len(calls) < 10_000
