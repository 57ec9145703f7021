"""Data prep's Dataflow job: its options from the compiled settings, refused as Dataflow would (Beam's validator),
and in the rehearsal recorded while the same pipeline runs on the direct runner."""

import json

import pytest

from components.lib import dataflow
from components.prepare_data import prepare

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


def test_a_small_source_is_prepared_in_the_step_with_the_options_checked_all_the_same(tmp_path, monkeypatch, capsys):
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
