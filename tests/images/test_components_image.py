"""The components image as Vertex AI (and Kubeflow) run a container step: the compiled pipeline's own command and
arguments with an executor input, artifacts under the pipeline root, the outputs in the executor output file that
the next step reads."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from kfp import dsl

from tests.helpers.model_answers import model_outputs, split_examples
from tests.helpers.podman import Container, image, podman, run
from tests.helpers.vertex_images import WORKERS, compiled, fuse_path, run_step


def test_data_prep_writes_the_shards_and_metadata_the_trainer_reads(prepared, storage):
    output, dataset_uri = prepared
    (dataset,) = output["artifacts"]["dataset"]["artifacts"]
    metadata = dataset["metadata"]
    assert metadata["kind"] == "image" and metadata["labels"] == [str(d) for d in range(10)]
    assert metadata["examples"] == 1797 and metadata["quarantined"] == 0
    folder = storage.host(dataset_uri)
    stats = json.loads((folder / "stats.json").read_text())
    assert sum(s["examples"] for s in stats["splits"].values()) == 1797
    assert all(s["shards"] >= WORKERS for s in stats["splits"].values())
    assert os.stat(folder / "stats.json").st_uid == 1000  # written by the image's user


def test_dataflow_workers_find_beams_launcher_and_the_environments_python():
    """Dataflow starts the image's entrypoint, Beam's launcher, which runs the SDK harness module with `python` on
    PATH, in that environment (no fresh virtual environment)."""
    [config] = json.loads(podman("image", "inspect", image("components")).stdout)
    assert config["Config"]["Entrypoint"] == ["/opt/apache/beam/boot"]
    assert "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1" in config["Config"]["Env"]
    code, out = run(
        image("components"),
        ["-c", "import shutil, apache_beam.runners.worker.sdk_worker_main; print(shutil.which('python'))"],
        entrypoint=["python"],
    )
    assert code == 0 and out.strip().splitlines()[-1] == "/opt/venv/bin/python", out
    code, out = run(image("components"), [])  # the launcher as Dataflow starts it, here without its flags
    if "could not be pulled" in out:
        pytest.skip("built with containers/images.sh's stand-in launcher: Beam's SDK image could not be pulled")
    code, magic = run(
        image("components"), ["-c", "print(open('/opt/apache/beam/boot', 'rb').read(4))"], entrypoint=["python"]
    )
    assert code == 0 and "\\x7fELF" in magic  # Beam's Go launcher


def test_beams_sdk_harness_in_the_image_runs_data_preps_transforms(tmp_path):
    """What Dataflow's workers do with the image: its launcher starts Beam's SDK harness (`boot --worker_pool` runs
    worker_pool_main) and the job's transforms, pickled by the launching step, run there. Here the pipeline of
    `prepare` runs on Beam's portable runner with that harness in the components image (an external environment),
    reading the image folder and writing the shards where it finds them (a host folder at the same path): the output
    is byte for byte that of the direct runner."""
    import apache_beam as beam  # noqa: F401 (the portable runner's options register on import)
    from apache_beam.options.pipeline_options import PipelineOptions

    import components.prepare_data as prep
    from components.train_model import free_ports
    from tests.helpers.data import write_images

    shared = tmp_path / "shared"
    write_images(shared / "images", per_class=15)
    (shared / "images" / "cats" / "broken.png").write_bytes(b"not a png")
    os.chmod(tmp_path, 0o777)
    [port] = free_ports(1)
    pool = Container(
        image("components"),
        ["-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"],
        entrypoint=["python"],
        volumes={str(shared): str(shared)},
    )
    mask = os.umask(0)  # the harness writes as the image's user into folders this process makes
    try:
        wait_for_port(port, pool)
        direct = prep.prepare(str(shared / "images"), str(shared / "direct"), num_workers=2)
        portable = PipelineOptions(
            [
                "--runner=PortableRunner",
                "--job_endpoint=embed",
                "--environment_type=EXTERNAL",
                f"--environment_config=localhost:{port}",
            ]
        )
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(prep, "pipeline_options", lambda processes, parallel: portable)
            harness = prep.prepare(str(shared / "images"), str(shared / "harness"), num_workers=2)
    finally:
        os.umask(mask)
        pool.stop(grace=5)
    assert "Starting worker" in pool.log()  # the transforms ran in the image
    assert harness == direct and direct["quarantined"] == 1
    names = sorted(p.name for p in (shared / "direct").iterdir())
    assert names == sorted(p.name for p in (shared / "harness").iterdir())
    assert all((shared / "direct" / n).read_bytes() == (shared / "harness" / n).read_bytes() for n in names)


def wait_for_port(port: int, container: Container, timeout: float = 120) -> None:
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert container.process.poll() is None, container.log()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"nothing listens on {port}:\n{container.log()}")


def artifact(cls, uri: str, metadata: dict | None = None):
    return cls(name=cls.schema_title.split(".")[-1].lower(), uri=uri, metadata=metadata or {})


@pytest.mark.parametrize("threshold, blessed", [(0.5, True), (0.999, False)])
def test_the_gate_reads_the_trained_model_and_decides(
    vertex_training_spec, prepared, trained_model_uri, storage, threshold, blessed
):
    output, dataset_uri = prepared
    (dataset,) = output["artifacts"]["dataset"]["artifacts"]
    result = run_step(
        vertex_training_spec,
        "evaluate-model",
        {
            "model": artifact(dsl.Model, trained_model_uri),
            "dataset": artifact(dsl.Dataset, dataset_uri, dataset["metadata"]),
            "accuracy_threshold": threshold,
            "champion_tolerance": 0.01,
            "champion_path": "",
            "champion_name": "",
            "champion_model_uri": "",
        },
        storage,
        run=f"gate-{threshold}",
    )
    assert result["parameterValues"]["Output"] is blessed
    (evaluation,) = result["artifacts"]["evaluation"]["artifacts"]
    assert evaluation["metadata"]["blessed"] is blessed and 0.5 < evaluation["metadata"]["accuracy"] <= 1
    assert json.loads(storage.host(evaluation["uri"]).read_text())["blessed"] is blessed  # the report the run shows
    (metrics,) = result["artifacts"]["metrics"]["artifacts"]
    assert metrics["metadata"]["accuracy"] == evaluation["metadata"]["accuracy"]


def test_the_batch_predictor_writes_vertexs_layout_and_counts_the_bad_instance(
    tmp_path_factory, prepared, trained_model_uri, storage
):
    """run-batch-prediction of the compiled Kubeflow pipeline (Vertex's own batch service runs the serving image)."""
    spec = compiled("kubeflow", "batch_prediction", tmp_path_factory.mktemp("compiled"))
    examples = split_examples(str(storage.host(prepared[1])), 64)
    instances = storage.host(prepared[1]).parent / "instances.jsonl"
    lines = [json.dumps(e.tolist()) for e in examples]
    instances.write_text("\n".join([*lines[:10], '{"not": "an image"}', *lines[10:]]) + "\n")
    result = run_step(
        spec,
        "run-batch-prediction",
        {
            "model_repository": "",
            "model_name": "digits",
            "model": fuse_path(trained_model_uri),
            "instances": fuse_path(storage.uri(instances)),
            "instances_format": "jsonl",
            "batch_size": 64,
            "key_field": "",
            "included_fields": [],
            "excluded_fields": [],
            "instance_type": "",
            "max_error_fraction": 0.05,
            "signature_name": "",
        },
        storage,
        run="batch-1",
    )
    values = result["parameterValues"]
    assert (values["succeeded"], values["failed"]) == (64, 1)
    folder = storage.host(values["output_directory"])
    assert folder.name.startswith("prediction-digits-")
    results = [json.loads(line) for f in sorted(folder.glob("prediction.results-*")) for line in f.open()]
    errors = [json.loads(line) for f in sorted(folder.glob("prediction.errors_stats-*")) for line in f.open()]
    assert len(results) == 64 and len(errors) == 1 and errors[0]["instance"] == {"not": "an image"}
    expected = model_outputs(str(storage.host(trained_model_uri)), examples)["class_id"]
    served = {key(r["instance"]): r["prediction"]["class_id"] for r in results}
    assert [served[key(e)] for e in examples] == expected.tolist()


def key(instance) -> tuple:
    return tuple(np.asarray(instance, np.float32).ravel().tolist())
