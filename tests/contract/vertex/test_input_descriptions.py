"""Every input of every compiled pipeline, and of every step of this project in it, carries a description (what the
Vertex AI and Kubeflow consoles show): the pipeline's from the config fields, the steps' from their `Args:`
docstrings. GCPC's ops and KFP's importers are not checked (their descriptions are theirs)."""

import pytest

from pipelines.batch_prediction import build_batch_pipeline
from pipelines.config import BatchParameters, PipelineParameters
from pipelines.training import build_pipeline
from tests.helpers.compiled import compiled_docs
from tests.helpers.platforms import IN_POD, PLATFORM

BUILDERS = {"training": build_pipeline, "batch_prediction": build_batch_pipeline}
# kubeflow twice: with Kubeflow's engines (TFJob, Katib, KServe) and with the in-pod steps
PLATFORMS = [("vertex", PLATFORM), ("kubeflow", PLATFORM), ("kubeflow", IN_POD), ("local", PLATFORM)]


def compiled(tmp_path, target, platform, pipeline) -> dict:
    return compiled_docs(target, pipeline, platform)[0]


def inputs(component: dict) -> dict:
    definitions = component.get("inputDefinitions", {})
    return {**definitions.get("parameters", {}), **definitions.get("artifacts", {})}


def own_steps(spec: dict, image: str) -> dict:
    """The components that run on this project's components image, by component name."""
    executors = spec["deploymentSpec"]["executors"]
    return {
        name: c
        for name, c in spec["components"].items()
        if executors.get(c.get("executorLabel"), {}).get("container", {}).get("image") == image
    }


@pytest.mark.parametrize("pipeline", BUILDERS)
@pytest.mark.parametrize("target, platform", PLATFORMS, ids=["vertex", "kubeflow", "kubeflow-in-pod", "local"])
def test_every_pipeline_and_step_input_is_described(tmp_path, target, platform, pipeline):
    spec = compiled(tmp_path, target, platform, pipeline)
    steps = own_steps(spec, platform.components_image)
    assert steps
    missing = [f"pipeline input {name}" for name, d in inputs(spec["root"]).items() if not d.get("description")]
    missing += [
        f"{step} input {name}"
        for step, component in sorted(steps.items())
        for name, d in inputs(component).items()
        if not d.get("description")
    ]
    assert missing == []


@pytest.mark.parametrize(
    "pipeline, parameters", [("training", PipelineParameters), ("batch_prediction", BatchParameters)]
)
def test_pipeline_inputs_are_the_config_fields_with_their_descriptions(tmp_path, pipeline, parameters):
    spec = compiled(tmp_path, "local", PLATFORM, pipeline)
    assert {name: d["description"] for name, d in inputs(spec["root"]).items()} == {
        name: field.description for name, field in parameters.model_fields.items()
    }


def test_step_inputs_take_the_wrappers_docstrings(tmp_path):
    spec = compiled(tmp_path, "local", PLATFORM, "training")
    prepare = inputs(spec["components"]["comp-prepare-data"])
    assert prepare["data_fingerprint"]["description"] == (
        "The fingerprint step's digest of the source (keys the cache on the data)."
    )
    assert (
        prepare["num_workers"]["description"] == "Training workers: every split gets at least this many "
        "non-empty shards."
    )
    assert inputs(spec["root"])["epochs"]["description"] == "Epochs of the final training."
    assert sorted(own_steps(spec, PLATFORM.components_image)) == [
        "comp-check-champion",
        "comp-deploy-model",
        "comp-evaluate-model",
        "comp-find-repository-champion",
        "comp-fingerprint-data",
        "comp-prepare-data",
        "comp-publish-model",
        "comp-quantize-model",
        "comp-train-model",
        "comp-tune-hyperparameters",
    ]
