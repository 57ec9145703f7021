"""`render --target kubeflow`: every Kubernetes object the kubeflow steps would create for a config, and what
`manifests/kubeflow` applies for them, one YAML file per object (`<kind>-<name>.yaml`), for a platform team to
review and to check with `kubectl apply --dry-run=server -f DIR`.

The engine objects come from the steps' own builders (TFJob, Trainer v2's TrainJob and TrainingRuntime, the Katib
Experiment, the KServe InferenceService); the namespace's objects are the shipped manifests with the config's
namespace, claim, mount path, components image and service accounts. Values known only when a run executes are
placeholders (`PLACEHOLDERS`): `${NAME}` in free text (arguments, environment, paths), a DNS label in names and
labels, so that every object still passes its schema. The objects go to `platform.kubeflow.namespace`, else
`platform.kfp_namespace`, else `kubeflow` (a standalone Kubeflow Pipelines' namespace)."""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipelines.config import Config, Volume

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests" / "kubeflow"
RUN_ID = "run-id"  # a name's or label's run id
MODEL_VERSION = "model-version"  # a label's model version
PLACEHOLDERS = {
    RUN_ID: "the run's id in names and labels (names end in 10 hex digits of it: tfpipe-train-0123456789)",
    "${RUN_ID}": "the run's id in paths on the claim",
    MODEL_VERSION: "the published model version in labels",
    "${MODEL_VERSION}": "the published model version in the storage URI",
    "${BEST_*}": "the study's best trial value of that hyperparameter (with the tune parameter false: the pipeline's)",
}
_FREE_TEXT = re.compile(r"\$\{[A-Z][A-Z_]*\}")
DEFAULT_NAMESPACE = "kubeflow"
RUNNER = "tfpipe-runner"  # the runs' service account manifests/kubeflow ships (runner-serviceaccount.yaml)


class RenderError(ValueError):
    """The config cannot be rendered (one line: which setting, and why)."""


@dataclass(frozen=True)
class Rendered:
    """One object: its file name, what it is for, the object."""

    filename: str
    purpose: str
    body: dict


def placeholders_in(text: str) -> list[str]:
    """The placeholders (`PLACEHOLDERS`' keys, `${BEST_*}` as each one found) that `text` holds, in order."""
    found = [p for p in (RUN_ID, MODEL_VERSION) if p in text]
    return found + sorted(set(_FREE_TEXT.findall(text)))


def render_kubeflow(config: Config) -> list[Rendered]:
    """Every object of the config's kubeflow engines and namespace, the engine objects first."""
    config.check_target("kubeflow")
    k = config.platform.kubeflow
    namespace = k.namespace or config.platform.kfp_namespace or DEFAULT_NAMESPACE
    objects = []
    if k.training != "pod":
        objects += _training(config, namespace)
    if k.tuning == "katib":
        objects.append(_experiment(config, namespace))
    if k.serving == "kserve":
        objects.append(_inference_service(config, namespace))
    return objects + _namespace_objects(config, namespace)


def write(objects: list[Rendered], out: str, source: str) -> list[str]:
    """Write each object to `out/<kind>-<name>.yaml` under a comment naming its purpose and placeholders; the
    paths written."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for item in objects:
        body = yaml.safe_dump(item.body, sort_keys=False, width=120)
        header = [f"# {item.purpose}", f"# Rendered by `python -m pipelines render --target kubeflow` from {source}."]
        if found := placeholders_in(body):
            header.append("# Placeholders (set when a run executes):")
            header += [f"#   {p}: {PLACEHOLDERS.get(p) or PLACEHOLDERS['${BEST_*}']}" for p in found]
        path = os.path.join(out, item.filename)
        with open(path, "w") as f:
            f.write("\n".join(header) + "\n" + body)
        paths.append(path)
    return paths


def _rendered(purpose: str, body: dict) -> Rendered:
    return Rendered(f"{body['kind'].lower()}-{body['metadata']['name']}.yaml", purpose, body)


def _run_dir(config: Config) -> str:
    return os.path.join(config.platform.kubeflow.volume.mount_path, "runs", "${RUN_ID}")


def _labels(step: str) -> dict:
    from components.lib.kube import api as kube

    return kube.run_labels(RUN_ID, step)


def _training(config: Config, namespace: str) -> list[Rendered]:
    """The TFJob (training operator v1) and the TrainJob on the shipped TrainingRuntime (Trainer v2), the ones
    `platform.kubeflow.training` allows: with auto both, as the step creates the one its cluster serves."""
    from components.lib.kube import trainjob
    from components.lib.kube.volume import kept_checkpoint
    from components.lib.study.spec import pipeline_hyperparameters, with_best_trial
    from components.train_model_on_operator import as_dict, tfjob
    from trainer.environment import LEGACY_KERAS, output_dirs
    from trainer.flags import command_line

    p, platform, k = config.parameters, config.platform, config.platform.kubeflow
    job_dir = os.path.join(_run_dir(config), "train-model")
    best = {q.parameter_id: f"${{BEST_{q.parameter_id.upper()}}}" for q in config.study.parameters}
    warm = kept_checkpoint(_run_dir(config)) if config.study.warm_start and k.tuning == "katib" else ""
    hyperparameters = with_best_trial(pipeline_hyperparameters(p.batch_size, p.learning_rate), best, warm)
    args = command_line(
        {**hyperparameters, "epochs": p.epochs},
        data_dir=os.path.join(_run_dir(config), "dataset"),
        job_dir=job_dir,
        trainer=config.trainer.setup(config.study.metric_id),
    )
    env = {
        **output_dirs(job_dir),
        "CLOUD_ML_HP_METRIC_FILE": f"{job_dir}/hypertune/output.metrics",
        **LEGACY_KERAS,
        "PYTHONUNBUFFERED": "1",
    }
    common: dict[str, Any] = dict(
        name=f"tfpipe-train-{RUN_ID}",
        namespace=namespace,
        image=platform.kubeflow_trainer_image(),
        workers=p.workers,
        args=args,
        env=env,
        resources=k.worker_resources.requirements(),
        claim_name=k.volume.claim_name,
        mount_path=k.volume.mount_path,
        service_account=k.service_account,
        timeout_seconds=k.training_timeout_minutes * 60,
        labels=_labels("train-model"),
    )
    runtime = trainjob.training_runtime(max_restarts=p.max_restarts)
    runtime["metadata"]["namespace"] = namespace
    tfjob_object = _rendered(
        "The training step's TFJob (training operator v1.9), where the cluster serves TFJobs.",
        as_dict(tfjob(**common, max_restarts=p.max_restarts)),
    )
    trainjob_objects = [
        _rendered(
            f"The TrainingRuntime of Trainer v2 (max_restarts {p.max_restarts}) the TrainJob runs on "
            "(manifests/kubeflow/trainer-v2 ships it with max_restarts 2).",
            runtime,
        ),
        _rendered(
            "The training step's TrainJob (Kubeflow Trainer v2), where the cluster serves TrainJobs.",
            trainjob.trainjob(**common, runtime=runtime["metadata"]["name"]),
        ),
    ]
    engine = k.training
    return ([tfjob_object] if engine in ("auto", "tfjob") else []) + (
        trainjob_objects if engine in ("auto", "trainjob") else []
    )


def _experiment(config: Config, namespace: str) -> Rendered:
    """The tuning step's Katib Experiment with its trial template (Katib's `${trialParameters.*}` as they are)."""
    from components.lib.study.spec import pipeline_hyperparameters, trial_flags
    from components.tune_on_katib import experiment
    from trainer.flags import command_line

    p, k = config.parameters, config.platform.kubeflow
    try:
        body = experiment(
            name=f"tfpipe-tune-{RUN_ID}",
            namespace=namespace,
            spec=config.study,
            image=config.platform.kubeflow_trainer_image(),
            fixed_args=command_line(
                trial_flags(
                    p.tuning_trial_epochs,
                    pipeline_hyperparameters(p.batch_size, p.learning_rate),
                    p.workers,
                    config.study,
                ),
                data_dir=os.path.join(_run_dir(config), "dataset"),
                trainer=config.trainer.setup(config.study.metric_id),
            ),
            trials_dir=os.path.join(_run_dir(config), "tune-hyperparameters", "trials"),
            resources=k.worker_resources.requirements(),
            claim_name=k.volume.claim_name,
            mount_path=k.volume.mount_path,
            service_account=k.service_account,
            labels=_labels("tune-hyperparameters"),
        )
    except ValueError as e:
        raise RenderError(f"platform.kubeflow.tuning is katib, but {e}") from None
    return _rendered("The tuning step's Katib Experiment (one Job per trial).", body)


def _inference_service(config: Config, namespace: str) -> Rendered:
    """The InferenceService as the deploy step leaves it: a canary's `canaryTrafficPercent` when
    `traffic_percentage` is below 100 (a first deploy creates it without: all the traffic)."""
    from components.deploy_model_on_kserve import inference_service, predictor, storage_uri
    from pipelines.delivery.kubeflow import kubeflow_model_repository

    p, platform, k = config.parameters, config.platform, config.platform.kubeflow
    name = k.inference_service or p.model_name
    repository = p.model_repository or kubeflow_model_repository(platform)
    version_path = f"{repository.rstrip('/')}/{p.model_name}/${{MODEL_VERSION}}"
    try:
        uri = storage_uri(version_path, k.volume.claim_name, k.volume.mount_path)
    except ValueError as e:
        raise RenderError(f"parameters.model_repository: {e}") from None
    spec = predictor(
        uri=uri,
        model_name=name,
        image=platform.kubeflow_serving_image(),
        resources=k.serving_resources.requirements(),
        min_replicas=platform.serving_min_replicas,
        max_replicas=platform.serving_max_replicas,
        service_account=k.service_account,
    )
    purpose = "The deploy step's KServe InferenceService"
    if p.traffic_percentage < 100:
        spec["canaryTrafficPercent"] = p.traffic_percentage
        purpose += f", a canary of {p.traffic_percentage} % as a later rollout sets it"
    labels = {**_labels("deploy-model"), "tfpipe/model-version": MODEL_VERSION}
    return _rendered(
        f"{purpose}.", inference_service(name=name, namespace=namespace, spec_predictor=spec, labels=labels)
    )


def _namespace_objects(config: Config, namespace: str) -> list[Rendered]:
    """manifests/kubeflow's objects (its kustomization's resources) for this config: the claim and the permissions
    Job only with a claim."""
    platform, k = config.platform, config.platform.kubeflow
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    rendered = []
    for name in kustomization["resources"]:
        body = yaml.safe_load((MANIFESTS / name).read_text())
        if body["kind"] in ("PersistentVolumeClaim", "Job") and not k.volume.claim_name:
            continue
        body = _adapted(body, namespace, platform)
        rendered.append(_rendered(f"The namespace's {body['kind']} (manifests/kubeflow/{name}).", body))
    return rendered


def _adapted(body: dict, namespace: str, platform) -> dict:
    """A shipped manifest with the config's namespace, claim, mount path, components image and service accounts
    (what `kustomize edit` would set)."""
    body = copy.deepcopy(body)
    k, kind = platform.kubeflow, body["kind"]
    shipped_mount = Volume().mount_path
    body["metadata"]["namespace"] = namespace
    if kind == "PersistentVolumeClaim":
        body["metadata"]["name"] = k.volume.claim_name
    elif kind == "Job":
        pod = body["spec"]["template"]["spec"]
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"] = k.volume.claim_name
        for container in pod["containers"]:
            container["image"] = platform.components_image
            container["volumeMounts"][0]["mountPath"] = k.volume.mount_path
            container["command"] = [c.replace(shipped_mount, k.volume.mount_path) for c in container["command"]]
    elif kind == "RoleBinding":
        for subject in body["subjects"]:
            subject["namespace"] = namespace
            subject["name"] = platform.kfp_service_account or RUNNER
    elif kind == "ServiceAccount" and body["metadata"]["name"] == RUNNER:
        body["metadata"]["name"] = platform.kfp_service_account or RUNNER
    elif kind == "ServiceAccount":
        body["metadata"]["name"] = k.service_account or body["metadata"]["name"]
    return body
