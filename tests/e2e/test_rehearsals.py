"""`python -m pipelines rehearse` end to end: the compiled Vertex template run here against the Vertex AI API double,
in subprocesses as a user runs it; the recorded requests checked with the same expectations as the GAPIC-boundary
tests (tests/helpers/vertex_expectations.py)."""

import json
import os
import re
from pathlib import Path

import numpy as np
import yaml

from pipelines.config import load_config
from tests.helpers import vertex_expectations as expect
from tests.helpers.configs import IMAGE_SETS
from tests.helpers.processes import run_cli
from tests.helpers.rehearsal import IDENTITY, SETS, recorded


def test_two_rehearsals_a_canary_its_promotion_and_a_batch_job(tmp_path):
    state = tmp_path / "state"
    platform = load_config(sets=IDENTITY, environ={}).platform
    study = load_config(sets=IDENTITY, environ={}).study
    # 1: the fixed-hyperparameter branch, a new registry model and a new endpoint
    commit = "3f786850e387550fdab836ed7e6dc881de23001b"
    first = run_cli(
        "rehearse",
        "--out",
        tmp_path / "run1",
        "--state",
        state,
        *SETS,
        *("--param", "tune=false", "--param", "epochs=3", "--param", f"source_commit={commit}"),
    )
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((tmp_path / "run1" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["default-hyperparameters-2"] == "SUCCEEDED" and statuses["hyperparameter-tuning-job"] == "SKIPPED"
    assert statuses["create-model"] == statuses["ensure-endpoint"] == "SUCCEEDED"  # nothing existed yet
    # the trainer's progress lines, unchanged, in the custom job's log (Vertex: the job's container log)
    [job_log] = (tmp_path / "run1" / "vertex" / "jobs").glob("*/job.log")
    epochs = [line for line in job_log.read_text().splitlines() if line.startswith('TFPIPE_PROGRESS {"stage": "train"')]
    assert any('"event": "epoch"' in line and '"done": 3, "total": 3' in line for line in epochs), epochs
    assert summary["gate"]["blessed"] and summary["gate"]["champion"] is None
    assert summary["drift"]["reason"] == "no champion: no data drift check"
    [model] = summary["vertex"]["models"]
    assert set(model["versions"][0]["aliases"]) == {"default", "champion"}  # moved once the version served
    assert model["versions"][0]["labels"] == {**expect.resource_labels(platform), "source_commit": commit}
    expect.check_custom_job(recorded(tmp_path / "run1", "JobService.CreateCustomJob")[0], platform, workers=2)
    # data prep: the Dataflow job it would have sent (checked by Beam's validator), run on the direct runner
    sent = json.loads((tmp_path / "run1" / "dataflow" / "dataflow-options.json").read_text())
    assert {k: sent[k] for k in ("runner", "project", "region", "service_account_email", "network")} == {
        "runner": "DataflowRunner",
        "project": "my-project",
        "region": platform.location,
        "service_account_email": platform.service_account,
        "network": "vpc",
    }
    assert sent["dataflow_kms_key"] == platform.encryption_spec_key_name
    assert sent["sdk_container_image"] == platform.components_image and sent["sdk_location"] == "container"
    assert re.fullmatch(
        r"gs://rehearsal/pipeline-root/[-\w]+/prepare-data/dataset-dataflow/temp", sent["temp_location"]
    )
    assert {"env=test", "team=ml"} <= set(sent["labels"])
    assert summary["dataset"]["examples"] == 1797
    expect.check_upload(recorded(tmp_path / "run1", "ModelService.UploadModel")[0], platform, commit)
    expect.check_endpoint_create(recorded(tmp_path / "run1", "EndpointService.CreateEndpoint")[0]["endpoint"], platform)
    expect.check_deploy(_deploys(tmp_path / "run1")[0], platform)
    # the new deployed model answered the test split's examples through the endpoint's predict API before the rollout
    assert statuses["verify-vertex-deploy"] == statuses["finish-vertex-rollout"] == "SUCCEEDED"
    predicted = recorded(tmp_path / "run1", "PredictionService.Predict")  # one model: the split picks it each time
    assert [len(p["instances"]) for p in predicted] == [8, 8]
    assert [p.get("parameters") for p in predicted] == [None, {"signature_name": "serving_image_bytes"}]

    # 2: the tuning branch, compared with the first run's version, deployed as a 50 % canary
    canary = [*SETS, "--param", "epochs=3", "--param", "tuning_trial_epochs=1", "--param", "traffic_percentage=50"]
    canary += ["--param", "champion_tolerance=1.0"]
    second = run_cli("rehearse", "--out", tmp_path / "run2", "--state", state, *canary)
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((tmp_path / "run2" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["hyperparameter-tuning-job"] == statuses["read-best-trial"] == "SUCCEEDED"
    assert len(summary["tuning"]["trials"]) == 2 and summary["tuning"]["best"]["status"] == "SUCCEEDED"
    assert statuses["model-upload"] == "SUCCEEDED" and statuses["create-model"] == "SKIPPED"
    assert summary["gate"]["champion"]["name"] == f"champion {model['name']}@1"
    # the data drift check read the profile the first run's trainer kept beside its model in the registry: the same data
    assert summary["drift"]["compared"] and summary["drift"]["classes"]["l_infinity"] == 0.0
    assert summary["drift"]["past"] == [] and summary["drift"]["missing"] == summary["drift"]["new"] == []
    assert f"champion {model['name']}@1's" in summary["gate"]["reason"]
    expect.check_tuning_job(recorded(tmp_path / "run2", "JobService.CreateHyperparameterTuningJob")[0], platform, study)
    [endpoint] = summary["vertex"]["endpoints"]
    assert sorted(endpoint["traffic_split"].values()) == [50, 50] and len(endpoint["deployed_models"]) == 2
    assert statuses["verify-vertex-deploy"] == "SUCCEEDED"  # the canary's own answers, whichever the split picked
    [model] = summary["vertex"]["models"]
    assert [set(v["aliases"]) for v in model["versions"]] == [{"default", "champion"}, set()]  # canary: no alias

    # 2 again before anyone promotes (the next scheduled run): the cached model is the canary's version, deployed
    # already: nothing uploaded, nothing deployed, the endpoint as it was
    repeat = run_cli("rehearse", "--out", tmp_path / "run2-repeat", "--state", state, *canary)
    assert repeat.returncode == 0, repeat.stdout + repeat.stderr
    summary = json.loads((tmp_path / "run2-repeat" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    # the gate served from the cache: blessed against the same champion, as the canary's run was
    assert statuses["custom-training-job"] == statuses["evaluate-model"] == "CACHED"
    assert statuses["importer-2"] == statuses["finish-vertex-rollout-2"] == "SUCCEEDED"  # the registered version
    assert statuses["model-upload"] == statuses["deploy-vertex-model"] == "SKIPPED"
    assert not recorded(tmp_path / "run2-repeat", "POST models:upload") and not _deploys(tmp_path / "run2-repeat")
    assert [len(m["versions"]) for m in summary["vertex"]["models"]] == [2]
    assert summary["vertex"]["endpoints"] == [endpoint]  # the same two deployed models, at 50 % each

    promoted = run_cli("promote", "--rehearsal", state, *SETS)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    saved = json.loads((state / "vertex_state.json").read_text())
    [endpoint] = saved["endpoints"].values()
    assert list(endpoint["traffic_split"].values()) == [100] and len(endpoint["deployed_models"]) == 1
    assert [set(v["version_aliases"]) for v in next(iter(saved["models"].values()))["versions"]] == [
        set(),
        {"champion", "default"},
    ]

    # 2 again on unchanged data, as a schedule would: Vertex's cache serves the data prep, the tuning job and the
    # training job (their inputs hold nothing unique to a run); the gate then finds the candidate is the champion
    again = run_cli("rehearse", "--out", tmp_path / "run2-again", "--state", state, *canary)
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads((tmp_path / "run2-again" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    for step in ("prepare-data", "hyperparameter-tuning-job", "custom-training-job", "import-trained-model"):
        assert statuses[step] == "CACHED", (step, statuses)
    assert statuses["fingerprint-data"] == statuses["find-registry-champion"] == "SUCCEEDED"  # never cached
    assert "↺ custom-training-job served from cache" in again.stdout
    assert not recorded(tmp_path / "run2-again", "JobService.CreateCustomJob")
    assert not recorded(tmp_path / "run2-again", "JobService.CreateHyperparameterTuningJob")
    assert not summary["gate"]["blessed"] and "itself" in summary["gate"]["reason"]  # nothing to publish
    assert not recorded(tmp_path / "run2-again", "POST models:upload") and not _deploys(tmp_path / "run2-again")

    # 3: a batch prediction job on the champion, local instances staged into the GCS emulator
    instances = tmp_path / "instances.jsonl"
    instances.write_text(
        "".join(json.dumps(np.full((8, 8, 1), i, np.float32).tolist()) + "\n" for i in range(4)) + "not json\n"
    )
    batch = run_cli(
        "rehearse",
        "--pipeline",
        "batch_prediction",
        "--out",
        tmp_path / "run3",
        "--state",
        state,
        *SETS,
        "--param",
        f"instances={instances}",
        "--param",
        "max_error_fraction=0.5",
    )
    assert batch.returncode == 0, batch.stdout + batch.stderr
    summary = json.loads((tmp_path / "run3" / "run_summary.json").read_text())
    statuses = {s["name"]: s["status"] for s in summary["steps"]}
    assert statuses["model-batch-predict"] == statuses["check-batch-prediction-job"] == "SUCCEEDED"
    assert summary["batch_prediction"]["succeeded"] == 4 and summary["batch_prediction"]["failed"] == 1
    [staged] = summary["batch_prediction"]["files"]
    assert staged.startswith("gs://") and staged.endswith("/instances.jsonl")
    assert summary["batch_prediction"]["seconds"] > 0
    assert (
        "<h2>Batch prediction</h2><p>5 instances from\n1 file(s): 4 predicted"
        in (tmp_path / "run3" / "report.html").read_text()
    )
    [job] = recorded(tmp_path / "run3", "JobService.CreateBatchPredictionJob")
    expect.check_batch_job(job, platform)
    assert job["batch_prediction_job"]["model"] == f"{model['name']}@2"  # the promoted champion
    output = summary["batch_prediction"]["output_directory"]
    assert output.startswith("gs://")
    from core.storage import gcs_client, split_gcs
    from pipelines.rehearsal import gcs

    with gcs.gcs_emulator(str(state / "gcs"), "rehearsal") as host:  # the rehearsals' Cloud Storage, kept in --state
        os.environ["STORAGE_EMULATOR_HOST"] = host
        try:
            bucket, prefix = split_gcs(output)
            results = gcs_client().bucket(bucket).blob(f"{prefix}/prediction.results-00000-of-00001")
            assert len(results.download_as_text().splitlines()) == 4
        finally:
            del os.environ["STORAGE_EMULATOR_HOST"]
    for run in ("run1", "run2", "run3"):  # every artifact and output location Vertex got: gs://
        locations = _locations(tmp_path / run)
        assert locations and all(uri.startswith("gs://") for _, uri in locations), (run, locations)
    assert _locations(tmp_path / "run2-again") == []  # cache hits and no upload: no request named a location

    # nothing billed left behind: the endpoint serving the champion is deleted only with --force
    refused = run_cli("delete-endpoint", "--rehearsal", state, *SETS)
    assert refused.returncode == 1 and "serves traffic" in refused.stderr, refused.stdout + refused.stderr
    deleted = run_cli("delete-endpoint", "--rehearsal", state, *SETS, "--force")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert json.loads((state / "vertex_state.json").read_text())["endpoints"] == {}


LOCATIONS = ("artifact_uri", "output_uri_prefix", "uris", "gcs_output_directory", "--data-dir", "--job-dir")


def _locations(out: Path) -> list[tuple[str, str]]:
    """(field, value) of every Cloud Storage location in the recorded requests: URIs fields, and the trainer's
    location flags in job arguments."""
    found: list[tuple[str, str]] = []

    def walk(value, key=""):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif isinstance(value, list):
            if key == "args":
                found.extend((a, b) for a, b in zip(value, value[1:]) if a in LOCATIONS)
            for item in value:
                walk(item, key)
        elif key in LOCATIONS and isinstance(value, str):
            found.append((key, value))

    for line in (out / "vertex" / "vertex_requests.jsonl").read_text().splitlines():
        walk(json.loads(line)["request"])
    return found


def _deploys(out: Path) -> list[dict]:
    lines = (out / "vertex" / "vertex_requests.jsonl").read_text().splitlines()
    return [r["request"] for r in map(json.loads, lines) if r["method"].endswith(":deployModel")]


def test_a_wrong_wire_fails_with_the_step_and_the_apis_message(tmp_path):
    """The custom job's base output directory wired to the plan's display name instead of its claimed folder: the
    double refuses CreateCustomJob as Vertex AI would, and the rehearsal names the step and the message."""
    compiled = tmp_path / "template.yaml"
    assert run_cli("compile", "--target", "vertex", *IMAGE_SETS, "--output", compiled).returncode == 0
    spec = yaml.safe_load(compiled.read_text())
    wire = spec["root"]["dag"]["tasks"]["custom-training-job"]["inputs"]["parameters"]["base_output_directory"]
    wire["taskOutputParameter"] = {"producerTask": "plan-vertex-training-2", "outputParameterKey": "display_name"}
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = run_cli(
        "rehearse",
        "--template",
        broken,
        "--out",
        tmp_path / "run",
        "--state",
        tmp_path / "state",
        "--param",
        "tune=false",
        "--param",
        "epochs=1",
    )
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "Error: custom-training-job: Vertex AI: job_spec.base_output_directory.output_uri_prefix 'tfpipe-training-"
    ) and error.endswith("-train' is not a Cloud Storage URI (gs://BUCKET/PATH)")
    statuses = {
        s["name"]: s["status"] for s in json.loads((tmp_path / "run" / "run_summary.json").read_text())["steps"]
    }
    assert statuses["custom-training-job"] == "FAILED" and statuses["evaluate-model"] == "SKIPPED"


def test_a_disabled_dataflow_api_fails_data_prep_with_googles_message(tmp_path):
    """iam.json edited to rehearse a set-up without the Dataflow API (its other sections the config's set-up):
    prepare-data's job is refused, and the rehearsal's last line names the step and the API."""
    from pipelines import preflight

    state = tmp_path / "state"
    state.mkdir()
    platform = load_config(sets=IDENTITY, environ={}).platform
    services = [s for s in preflight.required_services(platform) if s != "dataflow.googleapis.com"]
    (state / "iam.json").write_text(json.dumps({"services": services}))
    result = run_cli("rehearse", "--out", tmp_path / "run", "--state", state, *SETS, "--param", "epochs=1")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: prepare-data: Dataflow: Dataflow API has not been used in project 308452716099 before or it is "
        "disabled. Enable it by visiting https://console.developers.google.com/apis/api/dataflow.googleapis.com/"
        "overview?project=308452716099 then retry. If you enabled this API recently, wait a few minutes for the "
        "action to propagate to our systems and retry."
    )
    statuses = {
        s["name"]: s["status"] for s in json.loads((tmp_path / "run" / "run_summary.json").read_text())["steps"]
    }
    assert statuses["prepare-data"] == "FAILED"
    assert json.loads((state / "iam.json").read_text())["services"] == services  # kept as edited
