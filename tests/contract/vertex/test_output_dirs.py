"""The output folders of the Vertex jobs a cache may serve (components/lib/vertex/output_dirs.py), on a real GCS JSON
API server: a job gets a folder no other job writes, and a later run reuses only the folder of a completed job."""

import json

import pytest
from kfp import dsl

from components.claim_output_directory import claim_output_directory
from components.import_trained_model import import_trained_model
from components.lib.vertex.output_dirs import claim, record, run_folder

ROOT = "gs://test-bucket/root/run-a/plan-vertex-training/job_dir"
JOB = "projects/p/locations/europe-west4/customJobs/{}"


def resources(job_id: str) -> str:
    uri = f"https://europe-west4-aiplatform.googleapis.com/v1/{JOB.format(job_id)}"
    return json.dumps({"resources": [{"resourceType": "CustomJob", "resourceUri": uri}]})


def test_two_runs_at_once_write_two_folders_and_later_runs_reuse_the_completed_one(gcs_emulator):
    from core.storage import read_bytes

    # the weekly schedule and a run on merge start together: both find the plan cached, neither job has completed
    first = claim_output_directory(ROOT, "tfpipe-training-20261128-0600")
    second = claim(ROOT, "projects/308452716099/locations/europe-west4/pipelineJobs/tfpipe-training-merge-7")
    assert first == f"{ROOT}/tfpipe-training-20261128-0600"
    assert second == f"{ROOT}/tfpipe-training-merge-7"
    # the merge run's job completes first, then the schedule's: the folder recorded is one of a completed job
    record(ROOT, second, resources("2"))
    record(ROOT, first, resources("1"))
    assert json.loads(read_bytes(f"{ROOT}/completed.json")) == {"directory": first, "job": JOB.format("1")}
    # next week, the plan and the job served from the cache: the job's own folder, whatever the run
    assert claim(ROOT, "tfpipe-training-20261205-0600") == first


def test_a_failed_job_leaves_no_record_and_the_next_run_gets_its_own_folder(gcs_emulator):
    assert claim(ROOT, "run-1") == f"{ROOT}/run-1"  # its job fails: nothing recorded
    assert claim(ROOT, "run-2") == f"{ROOT}/run-2"


def test_run_folder_names():
    assert run_folder("Tfpipe_Training 2026/11/28") == "28"
    assert run_folder("projects/p/locations/l/pipelineJobs/tfpipe-training-20261128") == "tfpipe-training-20261128"
    assert run_folder("A_b.c") == "a-b-c"
    with pytest.raises(ValueError, match="no run name"):
        run_folder("///")


def test_import_reads_the_jobs_folder_and_records_it(gcs_emulator, tmp_path, monkeypatch):
    from kfp.dsl.types import artifact_types

    from core.storage import read_bytes

    monkeypatch.setattr(artifact_types, "_GCS_LOCAL_MOUNT_PREFIX", f"{tmp_path}/gcs/")  # Vertex's /gcs/ mount
    folder = tmp_path / "gcs" / "test-bucket" / "root" / "run-a" / "plan-vertex-training" / "job_dir" / "run-b"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "saved_model.pb").write_bytes(b"pb")
    summary = {"val_accuracy": 0.9, "val_loss": 0.3, "train_accuracy": 0.95, "train_loss": 0.2}
    (folder / "metrics.json").write_text(json.dumps(summary))
    (folder / "history.jsonl").write_text("{}\n")
    job_dir = dsl.Artifact(uri=ROOT)
    model, metrics, training = dsl.Model(uri="gs://test-bucket/m"), dsl.Metrics(), dsl.Artifact(uri="t")
    training.path = str(tmp_path / "training")
    outputs = import_trained_model(job_dir, f"{ROOT}/run-b", resources("3"), model, metrics, training)
    assert outputs.model_uri == model.uri == f"{ROOT}/run-b/model"
    assert json.loads(read_bytes(f"{ROOT}/completed.json")) == {"directory": f"{ROOT}/run-b", "job": JOB.format("3")}
    with pytest.raises(ValueError, match="is not under its plan's"):
        import_trained_model(job_dir, "gs://test-bucket/elsewhere", resources("3"), model, metrics, training)
