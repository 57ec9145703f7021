"""Cloud Storage calls of the steps (core.storage) under the project's retry policy, on a real GCS JSON API server:
Cloud Storage's 503 and 429 answers, given at the client's HTTP transport before the request reaches the server, are
repeated with the policy's backoff and said (google-cloud-storage's own default retried them without a word), and the
result is what the server holds."""

import json

import pytest
import requests

from components.lib.vertex.output_dirs import claim, record
from core import retries

ROOT = "gs://test-bucket/root/plan/job_dir"
JOB = "projects/p/locations/europe-west4/customJobs/1"


class FlakyTransport:
    """The storage client's HTTP session, answering the requests `fail(method, path)` picks with Cloud Storage's
    error answer `status` (once each), passing the others to the server; `lost`: the picked requests reach the server
    too, only their answers are replaced (the service acted, its answer was lost). Every request in `sent` as
    (method, path, answered status)."""

    def __init__(self, session, fail, status=503, lost=False):
        self.session, self.fail, self.status, self.lost = session, fail, status, lost
        self.original = session.request
        self.sent = []
        self.failed = set()

    def request(self, method, url, *args, **kwargs):
        path = requests.utils.urlparse(url).path
        key = (method, path)
        if self.fail(method, path) and key not in self.failed:
            self.failed.add(key)
            if self.lost:
                self.original(method, url, *args, **kwargs)
            self.sent.append((method, path, self.status))
            answer = requests.Response()
            answer.status_code, answer.url = self.status, url
            answer.headers["Content-Type"] = "application/json"
            message = "Backend Error" if self.status == 503 else "The rate of change requests is too high."
            answer._content = json.dumps({"error": {"code": self.status, "message": message}}).encode()
            answer.request = requests.Request(method, url).prepare()
            return answer
        answer = self.original(method, url, *args, **kwargs)
        self.sent.append((method, path, answer.status_code))
        return answer


@pytest.fixture
def flaky(gcs_emulator, monkeypatch):
    from core.storage import gcs_client

    monkeypatch.setattr(retries, "INITIAL", 0.001)
    monkeypatch.setattr(retries, "MAXIMUM", 0.001)
    session = gcs_client()._http

    def make(fail, status=503, lost=False):
        transport = FlakyTransport(session, fail, status, lost)
        monkeypatch.setattr(session, "request", transport.request)
        return transport

    return make


def test_a_record_written_and_read_through_unavailable_answers(flaky, capsys):
    transport = flaky(lambda method, path: path.startswith(("/upload/", "/download/")))  # each once
    record(ROOT, f"{ROOT}/run-1", json.dumps({"resources": [{"resourceUri": f"https://x/v1/{JOB}"}]}))
    assert claim(ROOT, "run-2") == f"{ROOT}/run-1"
    upload, download = "/upload/storage/v1/b/test-bucket/o", "/download/storage/v1/b/test-bucket/o/"
    name = "root%2Fplan%2Fjob_dir%2Fcompleted.json"
    sent = [(m, p.replace(name, "NAME"), s) for m, p, s in transport.sent if p != "/storage/v1/b/test-bucket"]
    assert sent == [  # (google-cloud-storage looks the bucket up once too, its own request)
        ("POST", upload, 503),  # the resumable upload's session
        ("POST", upload, 200),
        ("PUT", upload, 503),  # its one chunk, sent again in the session
        ("PUT", upload, 200),
        ("GET", download + "NAME", 503),
        ("GET", download + "NAME", 200),
    ]
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("retrying")]
    assert [line.split(", 'Expected")[0] for line in said] == [
        "retrying after a transient error: InvalidResponse: ('Request failed with status code', 503"
    ] * 3


def test_a_folder_removed_and_listed_through_rate_limit_answers(flaky, gcs_emulator, capsys):
    from core.storage import list_files, remove_tree

    for name in ("a", "b"):
        gcs_emulator.blob(f"tmp/.prep-1/{name}").upload_from_string(b"x")
    transport = flaky(lambda method, path: method in ("GET", "DELETE"), status=429)
    remove_tree("gs://test-bucket/tmp/.prep-1")
    assert list_files("gs://test-bucket/tmp/.prep-1") == []
    objects = "/storage/v1/b/test-bucket/o"
    assert transport.sent == [
        ("GET", objects, 429),
        ("GET", objects, 200),
        ("DELETE", f"{objects}/tmp%2F.prep-1%2Fa", 429),
        ("DELETE", f"{objects}/tmp%2F.prep-1%2Fa", 200),
        ("DELETE", f"{objects}/tmp%2F.prep-1%2Fb", 429),
        ("DELETE", f"{objects}/tmp%2F.prep-1%2Fb", 200),
        ("GET", objects, 200),
    ]
    assert capsys.readouterr().out.count("retrying after a transient error: TooManyRequests: 429 GET") == 1


def test_a_delete_whose_answer_was_lost_is_done_when_its_repeat_finds_nothing(flaky, gcs_emulator):
    """Cloud Storage deleted the object but its answer was lost: the repeat gets 404, which is the delete done (the
    pre-flight probe, a step's temporary folder), not a missing bucket or a failed step."""
    from core.storage import remove_tree
    from pipelines.preflight import check_bucket

    transport = flaky(lambda method, path: method == "DELETE", lost=True)
    assert check_bucket("gs://test-bucket/pipeline-root") == []
    [(_, probe, _)] = [s for s in transport.sent if s[0] == "DELETE"][:1]
    assert probe.startswith("/storage/v1/b/test-bucket/o/pipeline-root%2F.tfpipe-preflight-")
    assert [s for s in transport.sent if s[0] == "DELETE"] == [("DELETE", probe, 503), ("DELETE", probe, 404)]

    gcs_emulator.blob("tmp/.prep-2/a").upload_from_string(b"x")
    remove_tree("gs://test-bucket/tmp/.prep-2")
    deleted = "/storage/v1/b/test-bucket/o/tmp%2F.prep-2%2Fa"
    assert [s for s in transport.sent if s[1] == deleted] == [("DELETE", deleted, 503), ("DELETE", deleted, 404)]
    assert list(gcs_emulator.client.list_blobs("test-bucket")) == []
