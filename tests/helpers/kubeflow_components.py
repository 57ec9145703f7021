"""The Kubeflow engine steps' component functions called as a run calls them, for their tests on the Kubernetes double
(tests/contract/kubeflow/) and with the built images (tests/images/): the artifacts as a step sees them, the kinds
each engine installs, Katib's controllers on the double."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from components.deploy_model_on_kserve import deploy_model_on_kserve
from components.lib.study.spec import DEFAULT_STUDY, StudySpec
from tests.doubles.k8s import KubeAPI, engine_arguments, in_run
from trainer.flags import TrainerSetup

EXPERIMENTS = {"kubeflow.org/v1beta1": {"experiments": "Experiment", "trials": "Trial", "suggestions": "Suggestion"}}
KSERVE = {
    "serving.kserve.io/v1beta1": {"inferenceservices": "InferenceService"},
    "serving.knative.dev/v1": {"revisions": "Revision"},
}
SMALL_STUDY = StudySpec.model_validate({**DEFAULT_STUDY.model_dump(), "max_trial_count": 2, "parallel_trial_count": 2})


class Metrics:
    """A KFP Metrics artifact as a step sees it."""

    def __init__(self):
        self.logged = {}

    def log_metric(self, key, value):
        self.logged[key] = value


@dataclass
class Art:
    """A KFP artifact as a step sees it: a path and metadata."""

    path: str
    metadata: dict = field(default_factory=dict)


def katib_api(kubelet, monkeypatch, home, labels: dict | None = None, **server):
    """The double with Katib's controllers over `kubelet`, its namespace labelled for the metrics collector (and with
    `labels`); `server`: more of KubeAPI's settings (faults)."""
    from tests.doubles.k8s import point_clients_at, shipped_rules
    from tests.doubles.k8s.katib import INJECTION
    from tests.doubles.k8s.katib_operator import KatibOperator

    operator = KatibOperator(kubelet)
    api = KubeAPI(
        installed=dict(EXPERIMENTS),
        controllers=[operator],
        namespaces={"ml": {INJECTION: "enabled", **(labels or {})}},
        rbac=shipped_rules(),
        **server,
    )
    point_clients_at(api, monkeypatch, home)
    return api, operator


def run_train_model_on_operator(
    volume, data_dir, tmp_path, model="trainer.model:build_model", max_restarts=1, engine="auto", hyperparameters=None
):
    """train-model-on-operator's component function: a chief and a worker train on `data_dir` for one epoch on
    `engine` (with `hyperparameters`, else batch size 32 and learning rate 0.003); its outputs (model, metrics)."""
    from types import SimpleNamespace

    from components.train_model_on_operator import train_model_on_operator

    outputs = SimpleNamespace(model=SimpleNamespace(path=str(tmp_path / "model"), metadata={}), metrics=Metrics())
    with in_run():
        train_model_on_operator(
            dataset=SimpleNamespace(path=str(data_dir)),
            workers=2,
            epochs=1,
            hyperparameters=hyperparameters or {"batch_size": 32, "learning_rate": 0.003},
            trainer=TrainerSetup(model).as_dict(),
            max_restarts=max_restarts,
            trainer_image="tfpipe/trainer:dev",
            **engine_arguments(volume),
            engine=engine,
            model=outputs.model,
            metrics=outputs.metrics,
            training=SimpleNamespace(path=str(tmp_path / "training")),
        )
    return outputs


def run_tune_on_katib(volume, data_dir, tmp_path, model="trainer.model:build_model", study=SMALL_STUDY):
    """tune-on-katib's component function: `study` (by default two trials) of one epoch each on `data_dir`;
    (hyperparameters, tuning)."""
    from types import SimpleNamespace

    from components.tune_on_katib import tune_on_katib

    tuning = SimpleNamespace(path=str(tmp_path / "tuning"), metadata={})
    with in_run():
        hyperparameters = tune_on_katib(
            dataset=SimpleNamespace(path=str(data_dir)),
            study_spec=study.model_dump(),
            enabled=True,
            trial_epochs=1,
            batch_size=32,
            learning_rate=0.01,
            workers=1,
            trainer=TrainerSetup(model).as_dict(),
            trainer_image="tfpipe/trainer:dev",
            **engine_arguments(volume),
            tuning=tuning,
        )
    return hyperparameters, tuning


def run_deploy_model_on_kserve(volume, model_dir, data_dir, name, traffic=100, tmp=None):
    """publish-model's output for `model_dir`, then the deploy step's component function."""
    from components.lib.deploy.model_repository import publish

    repository = str(volume / "model-repository")
    version = publish(str(model_dir), repository, name, {"run": "r"})
    endpoint = Art(str(tmp / f"endpoint-{version.number}.json"))
    with in_run(f"run-{version.number}"):
        outputs = deploy_model_on_kserve(
            published=Art(version.path, {"version": float(version.number), "path": version.path}),
            dataset=Art(str(data_dir)),
            model_repository=repository,
            model_name=name,
            traffic_percentage=traffic,
            inference_service="",
            serving_image="tfpipe/serving:dev",
            min_replicas=1,
            max_replicas=1,
            keep_previous=1,
            endpoint=endpoint,
            **engine_arguments(volume),
        )
    return version, outputs, json.loads(open(endpoint.path).read())
