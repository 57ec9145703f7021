"""docs/guides/python.md's local run and rehearsal, run as written (one run of each, shared by the assertions): the
built-in digits data set, two epochs, no study, no server."""

import os

from tests.helpers.python_guide import blocks


def test_the_guides_local_run_and_rehearsal_succeed_and_say_what_they_did(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("TFPIPE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in [b for b in blocks() if b.e2e or "load_config" in b.code][:3]:
        block.run(namespace)
    summary, rehearsal = namespace["summary"], namespace["rehearsal"]
    assert (summary.status, summary.error) == ("SUCCEEDED", None)
    assert summary.out == tmp_path / "runs" / "from-python"
    assert (summary.out / "run_summary.json").is_file()
    assert "train-model" in [s.name for s in summary.steps]
    assert {s.status for s in summary.steps} <= {"SUCCEEDED", "SKIPPED"}
    assert 0 <= summary.metrics["test_accuracy"] <= 1
    assert summary.registered is not None and summary.registered.model_name == "tfpipe-model"
    assert summary.gate is not None and summary.endpoint is None
    assert (rehearsal.status, rehearsal.error) == ("SUCCEEDED", None)
    assert rehearsal.vertex_requests and {"seq", "api", "method", "request"} <= set(rehearsal.vertex_requests[0])
