"""The trainer image as Vertex AI runs it: a custom job's worker pools (chief and worker, CLUSTER_SPEC and TF_CONFIG)
and a tuning trial with the arguments Vertex appends. (As the training operator runs it: test_kubeflow_engines.)"""

from __future__ import annotations

import json
import os

from components.lib.study.hypertune_metrics import read_reports
from components.lib.study.spec import DEFAULT_STUDY
from tests.helpers.podman import Container, image
from tests.helpers.vertex_images import BUCKET, WORKERS, fuse_path


def test_worker_pools_train_the_prepared_data_and_the_chief_alone_writes_the_model(vertex_trained, storage):
    base, codes, logs, pools = vertex_trained
    assert codes == [0] * WORKERS, "\n".join(log[-2000:] for log in logs)
    assert [p["container_spec"]["command"] for p in pools] == [["python", "-m", "trainer.task"]] * 2
    job = storage.host(base)
    assert sorted(os.listdir(job)) == ["checkpoints", "history.jsonl", "logs", "metrics.json", "model"]
    assert (job / "model" / "saved_model.pb").is_file()
    assert (job / "model" / "assets.extra" / "tf_serving_warmup_requests").is_file()
    assert os.stat(job / "model" / "saved_model.pb").st_uid == 1000  # the image's user
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["val_accuracy"] > 0.5 and metrics["num_workers"] == WORKERS, metrics
    assert metrics["strategy"] == "MultiWorkerMirroredStrategy" and metrics["model_dir"] == fuse_path(f"{base}/model")
    history = [json.loads(line) for line in (job / "history.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert "Traceback" not in "".join(logs)


def test_a_tuning_trial_with_vertexs_appended_arguments_reports_its_metric(prepared, storage, tmp_path):
    """Vertex appends `--PARAMETER=VALUE` per tuned parameter to the trial pool's arguments, sets CLOUD_ML_TRIAL_ID
    and the AIP_* folders under `<base>/<trial id>/`, and reads hypertune's default file."""
    from components.plan_vertex_training import worker_pool_specs
    from pipelines.rehearsal.jobs import aip_dirs

    tuned = {p.parameter_id: p for p in DEFAULT_STUDY.parameters}
    flags = {"model": "trainer.model:build_model", "batch_size": 32, "epochs": 2}
    (pool,) = worker_pool_specs(image("trainer"), fuse_path(prepared[1]), 1, "n1-standard-4", flags)
    spec = pool["container_spec"]
    assert not any(arg.lstrip("-").replace("-", "_") in tuned for arg in spec["args"] if arg.startswith("--"))
    appended = [f"--{name}={value}" for name, value in {"learning_rate": 0.004, "dropout": 0.1}.items()]
    assert set(name.split("=")[0][2:] for name in appended) <= set(tuned)
    base = f"gs://{BUCKET}/pipeline-root/run-1/plan-vertex-training-2/job_dir"
    metrics = tmp_path / "hypertune"
    metrics.mkdir()
    os.chown(metrics, 1000, 1000)
    env = {e["name"]: e["value"] for e in spec["env"]}
    env |= {"CLOUD_ML_TRIAL_ID": "7"} | {k: fuse_path(v) for k, v in aip_dirs(f"{base}/7").items()}
    container = Container(
        spec["image_uri"],
        [*spec["args"], *appended],
        entrypoint=spec["command"],
        env=env,
        volumes={**storage.volumes, str(metrics): "/tmp/hypertune"},
    )
    assert container.wait(600) == 0, container.log()[-3000:]
    reports = read_reports(str(metrics / "output.metrics"), DEFAULT_STUDY.metric_id)
    assert [step for step, _ in reports] == [1, 2] and all(0 < value <= 1 for _, value in reports)
    lines = [json.loads(line) for line in (metrics / "output.metrics").read_text().splitlines()]
    assert {line["trial"] for line in lines} == {"7"}
    assert (storage.host(base) / "7" / "model" / "saved_model.pb").is_file()
    used = json.loads((storage.host(base) / "7" / "metrics.json").read_text())["hyperparameters"]
    assert (used["learning_rate"], used["dropout"]) == (0.004, 0.1)
