"""Data prep's Dataflow job: its options from the compiled settings, refused as Dataflow would (Beam's validator),
and in the rehearsal recorded while the same pipeline runs on the direct runner."""

import json
import time

import pytest
from apache_beam.runners.dataflow.dataflow_runner import DataflowRuntimeException

from components.lib.prep import dataflow
from components.prepare_data import prepare
from tests.helpers.data import write_images

SETTINGS = {
    "project": "my-project",
    "region": "europe-west4",
    "service_account": "runner@my-project.iam.gserviceaccount.com",
    "network": "vpc",
    "subnetwork": "regions/europe-west4/subnetworks/ml",
    "kms_key": "projects/my-project/locations/europe-west4/keyRings/ml/cryptoKeys/tfpipe",
    "labels": {"env": "prod", "pipeline": "tfpipe-training"},
    "machine_type": "n1-highmem-4",
    "max_workers": 20,
    "sdk_container_image": "example.com/tfpipe/components:abc",
}


def test_flags_from_the_settings(monkeypatch):
    monkeypatch.setattr(dataflow, "job_name", lambda output_dir: "tfpipe-prepare-data-x")
    assert dataflow.flags(SETTINGS, "gs://b/root/run/prepare-data/dataset") == [
        "--runner=DataflowRunner",
        "--project=my-project",
        "--region=europe-west4",
        "--job_name=tfpipe-prepare-data-x",
        "--temp_location=gs://b/root/run/prepare-data/dataset-dataflow/temp",
        "--staging_location=gs://b/root/run/prepare-data/dataset-dataflow/staging",
        "--service_account_email=runner@my-project.iam.gserviceaccount.com",
        "--network=vpc",
        "--subnetwork=regions/europe-west4/subnetworks/ml",
        "--dataflow_kms_key=projects/my-project/locations/europe-west4/keyRings/ml/cryptoKeys/tfpipe",
        "--machine_type=n1-highmem-4",
        "--max_num_workers=20",
        "--sdk_container_image=example.com/tfpipe/components:abc",
        "--sdk_location=container",
        "--experiments=use_runner_v2",
        "--labels=env=prod",
        "--labels=pipeline=tfpipe-training",
    ]
    # a compiled dict's numbers are doubles: 20.0 in Python's JSON of the executor input (Beam refuses "20.0")
    assert "--max_num_workers=20" in dataflow.flags({**SETTINGS, "max_workers": 20.0}, "gs://b/d")
    given = dataflow.flags({**SETTINGS, "temp_location": "gs://b/root/dataflow/temp", "project": ""}, "gs://b/d", "p2")
    assert "--temp_location=gs://b/root/dataflow/temp" in given and "--project=p2" in given


def test_job_names_are_what_dataflow_accepts():
    name = dataflow.job_name("gs://b/root/run/prepare-data/dataset", now=0)
    assert name.startswith("tfpipe-prepare-data-19700101-000000-") and name == name.lower()
    assert name != dataflow.job_name("gs://b/root/other/prepare-data/dataset", now=0)


@pytest.mark.parametrize(
    "change, output_dir, reason",
    [
        (
            {"temp_location": "/tmp/local"},
            "gs://b/d",
            "Invalid GCS path (/tmp/local), given for the option: temp_location",
        ),
        ({"project": "My Project"}, "gs://b/d", "Invalid Project ID (My Project)"),
        ({}, "/local/out", "Invalid GCS path (/local/out-dataflow/temp)"),
        ({"sdk_container_image": ""}, "gs://b/d", "sdk_container_image: the workers' image"),
    ],
)
def test_what_dataflow_would_refuse_is_refused_before_anything_is_sent(change, output_dir, reason):
    with pytest.raises(dataflow.DataflowOptionsError, match="Dataflow would refuse this job") as error:
        dataflow.options({**SETTINGS, **change}, output_dir)
    assert reason in str(error.value)


def test_the_rehearsal_records_the_job_and_prepares_on_the_direct_runner(tmp_path, monkeypatch, gcs_emulator):
    """runner=dataflow writes the gs:// dataset; with RECORD_ENV the options are recorded, not sent, and the output
    is what the direct runner writes."""
    monkeypatch.setenv(dataflow.RECORD_ENV, str(tmp_path / "record"))
    stats = prepare(
        "builtin:iris", "gs://test-bucket/run/dataset", num_workers=1, runner="dataflow", dataflow_options=SETTINGS
    )
    sent = json.loads((tmp_path / "record" / dataflow.RECORD_FILE).read_text())
    assert sent["runner"] == "DataflowRunner" and sent["project"] == "my-project"
    assert sent["service_account_email"] == SETTINGS["service_account"] and sent["network"] == "vpc"
    assert sent["dataflow_kms_key"] == SETTINGS["kms_key"] and sent["labels"] == [
        "env=prod",
        "pipeline=tfpipe-training",
    ]
    assert sent["sdk_container_image"] == SETTINGS["sdk_container_image"]
    assert sent["temp_location"] == "gs://test-bucket/run/dataset-dataflow/temp"
    names = sorted(b.name for b in gcs_emulator.client.list_blobs("test-bucket", prefix="run/"))
    assert "run/dataset/stats.json" in names and "run/dataset/quarantine.jsonl" in names
    assert not [n for n in names if "/.prep-" in n]  # the runs and summaries are gone
    assert json.loads(gcs_emulator.blob("run/dataset/stats.json").download_as_bytes()) == stats
    direct = prepare("builtin:iris", str(tmp_path / "direct"), num_workers=1)
    for name in [n for n in names if n.endswith(".tfrecord")]:
        local = tmp_path / "direct" / name.rsplit("/", 1)[1]
        assert gcs_emulator.blob(name).download_as_bytes() == local.read_bytes()
    assert direct["splits"] == stats["splits"]


def test_a_small_source_is_prepared_in_the_step_with_the_options_checked_all_the_same(
    tmp_path, monkeypatch, capsys, gcs_emulator
):
    """Fewer records than dataflow_min_records: the step's direct runner writes its own view of the dataset (no job,
    nothing recorded); settings Dataflow would refuse are refused whatever the size."""
    monkeypatch.setenv(dataflow.RECORD_ENV, str(tmp_path / "record"))
    small = dict(runner="dataflow", dataflow_options=SETTINGS, dataflow_output_dir="gs://test-bucket/run/dataset")
    stats = prepare("builtin:iris", str(tmp_path / "view"), num_workers=1, dataflow_min_records=151, **small)
    assert stats["records"] == 150
    assert (tmp_path / "view" / "stats.json").is_file() and not (tmp_path / "record").exists()
    assert "150 records, fewer than dataflow_min_records (151): prepared in this step" in capsys.readouterr().out
    assert prepare("builtin:iris", str(tmp_path / "direct"), num_workers=1)["splits"] == stats["splits"]
    with pytest.raises(dataflow.DataflowOptionsError, match="Invalid Project ID"):
        prepare(
            "builtin:iris",
            str(tmp_path / "refused"),
            num_workers=1,
            dataflow_min_records=151,
            **{**small, "dataflow_options": {**SETTINGS, "project": "My Project"}},
        )
    assert not (tmp_path / "refused").exists()


def test_at_the_threshold_the_job_writes_the_gs_uri_not_the_steps_view(tmp_path, monkeypatch, gcs_emulator):
    monkeypatch.setenv(dataflow.RECORD_ENV, str(tmp_path / "record"))
    stats = prepare(
        "builtin:iris",
        str(tmp_path / "view"),
        num_workers=1,
        runner="dataflow",
        dataflow_options=SETTINGS,
        dataflow_min_records=150,
        dataflow_output_dir="gs://test-bucket/job/dataset",
    )
    sent = json.loads((tmp_path / "record" / dataflow.RECORD_FILE).read_text())
    assert sent["temp_location"] == "gs://test-bucket/job/dataset-dataflow/temp"
    assert json.loads(gcs_emulator.blob("job/dataset/stats.json").download_as_bytes()) == stats
    assert not (tmp_path / "view").exists()


class _PollingClock:
    """`time` for Beam's DataflowRunner, whose waits for a job sleep 5 s between reads of its state: 20 ms here,
    where the double's jobs end in a second."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, 0.02))


@pytest.fixture
def dataflow_api(gcs_emulator, monkeypatch):
    """The Dataflow API double (tests/doubles/dataflow.py), its workers able to pull the components image; Beam gets
    anonymous credentials, as the emulators take (it would otherwise look for them for half a minute), and reads
    the job's state as often as the double can answer."""
    import google.auth
    from apache_beam.internal.gcp import auth
    from apache_beam.runners.dataflow import dataflow_runner
    from google.auth.credentials import AnonymousCredentials

    from tests.doubles.dataflow import DataflowDouble

    monkeypatch.setattr(google.auth, "default", lambda *args, **kwargs: (AnonymousCredentials(), "my-project"))
    monkeypatch.setattr(auth._Credentials, "_credentials_init", False)
    monkeypatch.setattr(dataflow_runner, "time", _PollingClock())

    api = DataflowDouble(images={SETTINGS["sdk_container_image"]})
    try:
        yield api
    finally:
        api.close()


def test_the_job_runs_on_dataflow_as_sent_and_writes_what_the_direct_runner_writes(
    tmp_path, dataflow_api, gcs_emulator
):
    """Beam's DataflowRunner stages the pipeline and creates the job through the API double, which checks the request
    as the service does and runs the staged pipeline: the dataset on gs:// is byte for byte the direct runner's."""
    settings = {**SETTINGS, "endpoint": dataflow_api.endpoint, "temp_location": "", "staging_location": ""}
    stats = prepare(
        "builtin:iris", "gs://test-bucket/run/dataset", num_workers=1, runner="dataflow", dataflow_options=settings
    )
    [job] = dataflow_api.created()
    [stored] = dataflow_api.jobs.values()
    assert stored["currentState"] == "JOB_STATE_DONE" and stored["location"] == "europe-west4"
    assert job["name"].startswith("tfpipe-prepare-data-") and job["labels"] == SETTINGS["labels"]
    env = job["environment"]
    assert env["serviceAccountEmail"] == SETTINGS["service_account"]
    assert env["serviceKmsKeyName"] == SETTINGS["kms_key"]
    assert env["tempStoragePrefix"].startswith("storage.googleapis.com/test-bucket/run/dataset-dataflow/temp/")
    [pool] = env["workerPools"]
    assert pool["network"] == "vpc" and pool["subnetwork"] == SETTINGS["subnetwork"]
    assert pool["machineType"] == "n1-highmem-4" and pool["autoscalingSettings"] == {"maxNumWorkers": 20}
    assert {c["containerImage"] for c in pool["sdkHarnessContainerImages"]} == {SETTINGS["sdk_container_image"]}
    # nothing to install at the workers' start: Beam stages only the list of its submitting environment's packages
    assert [p["name"] for p in pool["packages"]] == ["submission_environment_dependencies.txt"]
    options = env["sdkPipelineOptions"]["options"]
    assert options["sdk_location"] == "container" and "use_runner_v2" in options["experiments"]
    assert options["pipelineUrl"].startswith("gs://test-bucket/run/dataset-dataflow/staging/")
    names = sorted(b.name for b in gcs_emulator.client.list_blobs("test-bucket", prefix="run/dataset/"))
    assert "run/dataset/stats.json" in names and not [n for n in names if "/.prep-" in n]
    direct = prepare("builtin:iris", str(tmp_path / "direct"), num_workers=1)
    assert direct["splits"] == stats["splits"]
    for name in [n for n in names if n.endswith(".tfrecord")]:
        assert (
            gcs_emulator.blob(name).download_as_bytes() == (tmp_path / "direct" / name.rsplit("/", 1)[1]).read_bytes()
        )


def test_an_image_folders_listing_stays_out_of_the_job_graph(tmp_path, dataflow_api, gcs_emulator):
    """Dataflow refuses job graphs over 10 MB: the listing rides in a file, so ten times the images make the same
    graph but for a few bytes (digits of byte offsets, the names of the outputs). The files have random names, as
    Beam compresses the graph: in it, 360 more would take about 7 kB. They are drawn from a seeded generator, so
    that the split (by the names' hashes) is the same every run, with examples in every split."""
    import random

    settings = {**SETTINGS, "endpoint": dataflow_api.endpoint}
    for per_class in (20, 200):
        names = random.Random(per_class)
        for path in sorted(write_images(tmp_path / f"images-{per_class}", per_class=per_class).rglob("*.png")):
            path.rename(path.with_name(f"{names.getrandbits(128):032x}.png"))
        stats = prepare(
            str(tmp_path / f"images-{per_class}"),
            f"gs://test-bucket/images-{per_class}",
            num_workers=1,
            processes=1,
            runner="dataflow",
            dataflow_options=settings,
        )
        assert stats["examples"] == 2 * per_class
    small, large = dataflow_api.graphs.values()
    assert abs(large - small) < 1000, (small, large)


def test_a_job_whose_workers_cannot_pull_the_image_fails_the_step_with_the_services_message(dataflow_api):
    settings = {**SETTINGS, "endpoint": dataflow_api.endpoint, "sdk_container_image": "example.com/tfpipe/gone:1"}
    with pytest.raises(DataflowRuntimeException, match="Failed to pull image example.com/tfpipe/gone:1"):
        prepare(
            "builtin:iris", "gs://test-bucket/pull/dataset", num_workers=1, runner="dataflow", dataflow_options=settings
        )
    [job] = dataflow_api.jobs.values()
    assert job["currentState"] == "JOB_STATE_FAILED"


def test_the_api_double_refuses_a_job_graph_over_its_limit(dataflow_api):
    """What the service refuses (a job graph over 10 MB), through Beam's own DataflowRunner, with the double's limit
    lowered to 1 MiB so that a Create of 2 MiB reaches it (random, as Beam compresses what it pickles)."""
    import os

    import apache_beam as beam

    from tests.doubles.dataflow import GRAPH_LIMIT

    assert GRAPH_LIMIT == 10 * 1024 * 1024
    dataflow_api.graph_limit = 1 << 20
    options = dataflow.options({**SETTINGS, "endpoint": dataflow_api.endpoint}, "gs://test-bucket/big")
    with pytest.raises(DataflowRuntimeException, match="The job graph is too large"):
        with beam.Pipeline(options=options) as p:
            _ = p | beam.Create([os.urandom(1 << 20) for _ in range(2)]) | beam.Map(len)
    assert list(dataflow_api.graphs.values())[0] > 1 << 20


def test_a_job_the_service_refuses_fails_the_step_with_its_reason(dataflow_api):
    """jobs.create answers 400 for a subnetwork in another region: the step fails with the service's words."""
    from google.api_core.exceptions import BadRequest

    settings = {**SETTINGS, "endpoint": dataflow_api.endpoint, "subnetwork": "regions/us-central1/subnetworks/ml"}
    with pytest.raises(BadRequest, match="must be in the job's region europe-west4"):
        prepare(
            "builtin:iris",
            "gs://test-bucket/refused/dataset",
            num_workers=1,
            runner="dataflow",
            dataflow_options=settings,
        )
    assert len(dataflow_api.created()) == 1 and not dataflow_api.jobs


def prepared_until_terminated(dataflow_api, output: str) -> dict:
    """Prepare on the double until SIGTERM ends the step: exit status 128 + SIGTERM, the step's handler gone; the
    job, cancelled."""
    import signal

    settings = {**SETTINGS, "endpoint": dataflow_api.endpoint}
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as ended:
        prepare("builtin:iris", output, num_workers=1, runner="dataflow", dataflow_options=settings)
    assert ended.value.code == 128 + signal.SIGTERM and signal.getsignal(signal.SIGTERM) == before
    [job] = dataflow_api.jobs.values()
    assert job["currentState"] == "JOB_STATE_CANCELLED"
    return job


def test_a_terminated_step_cancels_its_job(dataflow_api):
    """SIGTERM while the step waits (the run cancelled, or its time up) cancels the job through the API, which would
    otherwise run on without the step; the step then ends."""
    import os
    import signal
    import threading
    import time

    dataflow_api.start.clear()  # the job stays queued

    def terminate():
        while not dataflow_api.jobs:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate, daemon=True).start()
    job = prepared_until_terminated(dataflow_api, "gs://test-bucket/cancel/dataset")
    [(method, path, body)] = [r for r in dataflow_api.requests if r[0] == "PUT"]
    assert path.endswith(f"/jobs/{job['id']}") and body["requestedState"] in ("JOB_STATE_CANCELLED", 5)
    dataflow_api.start.set()


def test_a_step_terminated_while_its_job_is_created_cancels_the_job_once_it_exists(dataflow_api, monkeypatch, capsys):
    """SIGTERM that comes while the create request is in flight (the job exists in the service, the step does not
    know its id yet) is kept until the job is known, then cancels it: no job runs on without its step."""
    import os
    import signal

    dataflow_api.start.clear()  # the job stays queued
    create = dataflow_api.create

    def terminated_while_creating(*args):
        answer = create(*args)
        os.kill(os.getpid(), signal.SIGTERM)  # before the step has the answer
        return answer

    monkeypatch.setattr(dataflow_api, "create", terminated_while_creating)
    job = prepared_until_terminated(dataflow_api, "gs://test-bucket/cancel-early/dataset")
    assert f"terminated (signal {signal.SIGTERM}): cancelling the Dataflow job {job['id']}" in capsys.readouterr().out
    dataflow_api.start.set()


def test_a_step_whose_watch_gives_up_cancels_its_job(dataflow_api, monkeypatch, capsys):
    """Dataflow answering 503 to every look-up of the job while it is queued: Beam's client repeats the look-up (its
    backoff, without the waits here), then gives up; the step fails and cancels the job rather than leave it to run
    on without a watch."""
    from apache_beam.utils import retry as beam_retry

    monkeypatch.setattr(beam_retry.Clock, "sleep", lambda self, seconds: None)
    dataflow_api.start.clear()  # the job stays queued
    dataflow_api.unavailable = 8  # Beam's get_job: one try and 7 retries
    settings = {**SETTINGS, "endpoint": dataflow_api.endpoint}
    with pytest.raises(AssertionError, match="Job did not reach to a terminal state"):
        prepare(
            "builtin:iris",
            "gs://test-bucket/watch/dataset",
            num_workers=1,
            runner="dataflow",
            dataflow_options=settings,
        )
    dataflow_api.start.set()
    [job] = dataflow_api.jobs.values()
    assert job["currentState"] == "JOB_STATE_CANCELLED"
    path = f"/v1b3/projects/my-project/locations/europe-west4/jobs/{job['id']}"
    sent = [(method, p) for method, p, _ in dataflow_api.requests if "/messages" not in p]
    # the create; the watch's look-up, its 8 tries answered 503; the cancel: the job's state, the update, its state
    assert sent == [("POST", path.rsplit("/", 1)[0]), *[("GET", path)] * 8, ("GET", path), ("PUT", path), ("GET", path)]
    [cancel] = [body for method, _, body in dataflow_api.requests if method == "PUT"]
    assert cancel["requestedState"] in ("JOB_STATE_CANCELLED", 5)
    assert f"the step failed (AssertionError) while its Dataflow job {job['id']} runs: cancelling it" in (
        capsys.readouterr().out
    )
