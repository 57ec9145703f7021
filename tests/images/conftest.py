"""Fixtures of the image tests (`make test-images`, after `make images`): a run of the Vertex pipeline's steps in the
built images, each step reading what the one before wrote, as on Vertex AI: data prep (components image), the
training job's worker pools (trainer image), then the gate, the batch predictor and the server read that model."""

from __future__ import annotations

import pytest

from tests.helpers.podman import Container, image, missing_images
from tests.helpers.vertex_images import BUCKET, WORKERS, CloudStorage, compiled, fuse_path, run_step

IMAGES = ("components", "trainer", "serving")


@pytest.fixture(scope="session", autouse=True)
def built_images():
    missing = missing_images(IMAGES)
    if missing:
        pytest.fail(f"{', '.join(missing)} not built: run `make images` first", pytrace=False)


@pytest.fixture(scope="session")
def storage(tmp_path_factory):
    return CloudStorage(tmp_path_factory.mktemp("cloud-storage"))


@pytest.fixture(scope="session")
def vertex_training_spec(tmp_path_factory):
    return compiled("vertex", "training", tmp_path_factory.mktemp("compiled"))


@pytest.fixture(scope="session")
def prepared(vertex_training_spec, storage):
    """prepare-data of the compiled Vertex pipeline, in the components image: (executor output, dataset gs:// URI)."""
    output = run_step(
        vertex_training_spec,
        "prepare-data",
        {
            "data_source": "builtin:digits",
            "num_workers": WORKERS,
            "val_fraction": 0.1,
            "test_fraction": 0.2,
            "image_size": 0,
            "label_column": "label",
            "max_corrupt_fraction": 0.01,
            "split_salt": "",
            "data_fingerprint": "",
        },
        storage,
    )
    (dataset,) = output["artifacts"]["dataset"]["artifacts"]
    return output, dataset["uri"]


def run_custom_job(pools: list[dict], base: str, storage: CloudStorage, logs) -> list[Container]:
    """A CustomJob's worker pools as Vertex runs them: a container a replica, each with the pool's command, args and
    env, the AIP_* output directories under `base` and CLUSTER_SPEC / TF_CONFIG naming every replica (a free
    local port each: the containers share this machine's network)."""
    from components.train_model import free_ports
    from pipelines.rehearsal.jobs import aip_dirs, vertex_cluster_env

    replicas = [pool for pool in pools for _ in range(pool["replica_count"])]
    ports = free_ports(len(replicas))
    containers = []
    for index, pool in enumerate(replicas):
        spec = pool["container_spec"]
        env = {e["name"]: e["value"] for e in spec.get("env", [])}
        env |= {k: fuse_path(v) for k, v in aip_dirs(base).items()} | vertex_cluster_env(ports, index)
        containers.append(
            Container(
                spec["image_uri"],
                spec["args"],
                entrypoint=spec.get("command"),
                env=env,
                volumes=storage.volumes,
                log_path=str(logs / f"replica-{index}.log"),
            )
        )
    return containers


@pytest.fixture(scope="session")
def vertex_trained(prepared, storage, tmp_path_factory):
    """The training job of plan-vertex-training's worker pools (one chief, one worker) on the prepared data:
    (base output gs:// URI, the replicas' exit codes, their logs)."""
    from components.plan_vertex_training import worker_pool_specs

    _, dataset_uri = prepared
    flags = {"model": "trainer.model:build_model", "epochs": 3, "batch_size": 32, "learning_rate": 0.003}
    pools = worker_pool_specs(image("trainer"), fuse_path(dataset_uri), WORKERS, "n1-standard-4", flags)
    base = f"gs://{BUCKET}/pipeline-root/run-1/plan-vertex-training/job_dir"
    logs = tmp_path_factory.mktemp("custom-job")
    containers = run_custom_job(pools, base, storage, logs)
    codes = [c.wait(900) for c in containers]
    return base, codes, [c.log() for c in containers], pools


@pytest.fixture(scope="session")
def trained_model_uri(vertex_trained):
    base, codes, logs, _ = vertex_trained
    assert codes == [0] * WORKERS, "\n".join(log[-2000:] for log in logs)
    return f"{base}/model"
