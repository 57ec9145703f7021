"""Configuration: profiles, environment and --set overrides, precedence, validation messages
(pipelines/config/, pipelines/cron.py) and the compile command Cloud Build runs."""

import os
import re
import typing
import warnings
from datetime import UTC, datetime

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel

from pipelines.cli import cli
from pipelines.config import PIPELINES, ConfigError, env_overrides, load_config, parse_set, profile_names
from pipelines.cron import parse_cron
from tests.helpers.configs import SHIPPED, edited_shipped_config

BASE = """
parameters:
  epochs: 7
  workers: 3
platform:
  machine_type: n1-standard-8
  labels: {team: ml}
  schedule:
    cron: "0 3 * * 1"
    max_concurrent_runs: 2
study:
  max_trial_count: 6
profiles:
  dev:
    platform:
      project: my-dev-project
      pipeline_root: gs://dev-bucket/root
      labels: {env: dev}
    parameters:
      epochs: 2
  prod:
    platform:
      project: my-prod-project
      location: europe-west4
      pipeline_root: gs://prod-bucket/root
      service_account: runner@my-prod-project.iam.gserviceaccount.com
      network: projects/123456789/global/networks/vpc
      model_version_aliases: [prod-champion]
      schedule:
        cron: "TZ=Europe/Paris 0 3 * * 1"
"""


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "tfpipe.yaml"
    path.write_text(BASE)
    return path


def test_profile_deep_merges_over_the_base_sections(config_file):
    base = load_config(config_file, environ={})
    assert (base.platform.project, base.parameters.epochs, base.platform.location) == ("", 7, "us-central1")
    dev = load_config(config_file, profile="dev", environ={})
    # mappings merge key by key (labels, schedule); scalars and lists replace; untouched values stay
    assert dev.platform.labels == {"team": "ml", "env": "dev"}
    assert (dev.platform.project, dev.platform.pipeline_root) == ("my-dev-project", "gs://dev-bucket/root")
    assert (dev.parameters.epochs, dev.parameters.workers, dev.platform.machine_type) == (2, 3, "n1-standard-8")
    prod = load_config(config_file, profile="prod", environ={})
    assert prod.platform.schedule.cron == "TZ=Europe/Paris 0 3 * * 1"
    assert prod.platform.schedule.max_concurrent_runs == 2  # from the base's schedule mapping
    assert prod.platform.model_version_aliases == ["prod-champion"]
    assert prod.platform.labels == {"team": "ml"}
    assert (prod.platform.network, prod.platform.location) == ("projects/123456789/global/networks/vpc", "europe-west4")
    # a partial study section keeps the default search space
    assert prod.study.max_trial_count == 6
    assert [p.parameter_id for p in prod.study.parameters] == ["learning_rate", "hidden_units", "dropout"]
    assert profile_names(config_file) == ["dev", "prod"]


def test_precedence_cli_over_env_over_profile_over_base_over_defaults(config_file):
    environ = {
        "TFPIPE_PROFILE": "dev",
        "TFPIPE_PARAMETERS__EPOCHS": "4",  # env beats the profile (2) and the base (7)
        "TFPIPE_PARAMETERS__WORKERS": "5",  # env beats the base (3); --set beats env below
        "TFPIPE_PLATFORM__SCHEDULE__CRON": "0 4 * * *",
        "TFPIPE_PLATFORM__LABELS": "{owner: me}",  # YAML mapping: replaces the merged labels
        "TFPIPE_SERVING_STATE": "/tmp/elsewhere",
    }  # another tfpipe variable: ignored
    config = load_config(
        config_file,
        {"batch_size": 16, "epochs": None},
        environ=environ,
        sets=[
            "parameters.workers=6",
            "platform.trainer_image=r/trainer:1234567",
            "parameters.source_commit=1234567",
            "platform.labels.cost-center=42",
        ],
    )
    p = config.parameters
    assert (p.epochs, p.workers, p.batch_size, p.learning_rate) == (4, 6, 16, 0.003)  # ... > defaults
    assert config.platform.project == "my-dev-project"  # profile (TFPIPE_PROFILE)
    assert config.platform.schedule.cron == "0 4 * * *"
    assert config.platform.labels == {"owner": "me", "cost-center": "42"}
    # digits-only values stay strings for string fields (image tags, commits)
    assert (config.platform.trainer_image, p.source_commit) == ("r/trainer:1234567", "1234567")
    # the explicit profile argument (--profile) wins over TFPIPE_PROFILE
    assert load_config(config_file, profile="prod", environ=environ).platform.project == "my-prod-project"
    # the dedicated CLI options (overrides) win over --set
    assert load_config(None, {"epochs": 9}, sets=["parameters.epochs=8"], environ={}).parameters.epochs == 9


def test_unknown_profile_lists_the_available_ones(config_file):
    with pytest.raises(ConfigError) as e:
        load_config(config_file, profile="staging", environ={})
    assert str(e.value) == f"unknown profile 'staging': config file {config_file} defines profiles: dev, prod"
    with pytest.raises(ConfigError) as e:
        load_config(config_file, environ={"TFPIPE_PROFILE": "qa"})
    assert str(e.value) == f"unknown profile 'qa': config file {config_file} defines profiles: dev, prod"
    with pytest.raises(ConfigError) as e:
        load_config(None, profile="dev", environ={})
    assert str(e.value) == "profile 'dev': profiles are defined in a config file; pass --config FILE"


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        (
            "profiles:\n  prod:\n    platfrom: {project: p}\n",
            "invalid configuration: profiles.prod.platfrom: not a section; use one of: parameters, batch, platform, study, "
            "trainer",
        ),
        ("profiles: [prod]\n", "invalid configuration: profiles: must map profile names to sections"),
        (
            "profiles:\n  prod:\n    platform: my-project\n",
            "invalid configuration: profiles.prod.platform: must be a mapping",
        ),
        # a broken profile fails every load, not only the day it is selected
        (
            "profiles:\n  prod:\n    platform: {location: Europe West}\n",
            "invalid configuration: profiles.prod.platform.location: 'Europe West' is not a Google Cloud region like "
            "us-central1 or europe-west4",
        ),
    ],
)
def test_profile_structure_errors(tmp_path, yaml_text, message):
    (tmp_path / "c.yaml").write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml", environ={})
    assert str(e.value) == message


@pytest.mark.parametrize(
    "setting, field, message",
    [
        (
            "location: us central1",
            "platform.location",
            "'us central1' is not a Google Cloud region like us-central1 or europe-west4",
        ),
        (
            "project: My_Project",
            "platform.project",
            "'My_Project' is not a project id (6-30 lowercase letters, digits and hyphens)",
        ),
        (
            "service_account: runner",
            "platform.service_account",
            "'runner' is not a service account e-mail like NAME@PROJECT.iam.gserviceaccount.com",
        ),
        ("network: vpc", "platform.network", "'vpc' must look like projects/PROJECT_NUMBER/global/networks/NAME"),
        ("pipeline_root: bucket/root", "platform.pipeline_root", "'bucket/root' is not a URI (scheme://...)"),
        (
            "labels: {Team: ml}",
            "platform.labels",
            "Team='ml': keys must match ^[a-z][a-z0-9_-]{0,62}$ and values ^[a-z0-9_-]{0,63}$",
        ),
        ("trainer_image: ''", "platform.trainer_image", "'' is not an image URI"),
        (
            "schedule: {cron: '0 3 * *'}",
            "platform.schedule.cron",
            "'0 3 * *' has 4 field(s); a cron expression has 5 (minute hour day-of-month month day-of-week)",
        ),
        (
            "schedule: {cron: 'TZ=Europe/Pariss 0 3 * * 1'}",
            "platform.schedule.cron",
            "unknown time zone 'Europe/Pariss' in 'TZ=Europe/Pariss 0 3 * * 1': use an IANA name like Europe/Paris",
        ),
        (
            "schedule: {start_time: tomorrow}",
            "platform.schedule.start_time",
            "'tomorrow' is not an RFC 3339 time like 2026-01-01T00:00:00Z",
        ),
        (
            "schedule: {max_concurrent_runs: 0}",
            "platform.schedule.max_concurrent_runs",
            "Input should be greater than or equal to 1 (got 0)",
        ),
        (
            "schedule: {crontab: '0 3 * * 1'}",
            "platform.schedule.crontab",
            "Extra inputs are not permitted (got '0 3 * * 1')",
        ),
        (
            "accelerator_type: NVIDIA_TESLA_T4",
            "platform",
            "accelerator_type and accelerator_count must be set together",
        ),
        (
            "enable_caching: true",
            "platform.enable_caching",
            "true would cache every step of a run, the champion, registry and endpoint look-ups too (a run-level setting "
            "overrides each step's): leave it null for the compiled settings (look-ups never cached, the rest keyed on the "
            "data's fingerprint) or set false",
        ),
        (
            "encryption_spec_key_name: my-key",
            "platform",
            "encryption_spec_key_name: 'my-key' must look like projects/P/locations/L/keyRings/R/cryptoKeys/K",
        ),
        (
            "encryption_spec_key_name: projects/p/locations/us-east1/keyRings/r/cryptoKeys/k",
            "platform",
            "encryption_spec_key_name: 'projects/p/locations/us-east1/keyRings/r/cryptoKeys/k' is in us-east1; Vertex AI "
            "needs it in the runs' location us-central1",
        ),
        (
            "tensorboard: projects/p/locations/us-central1/tensorboards/7",
            "platform",
            "tensorboard needs service_account: Vertex AI writes to a TensorBoard instance only from a training job that "
            "runs as a service account",
        ),
        ("tensorboard: tb-1", "platform", "tensorboard: 'tb-1' must look like projects/P/locations/L/tensorboards/ID"),
        (
            "training_capacity: {strategy: PREEMPTIBLE}",
            "platform.training_capacity.strategy",
            "'PREEMPTIBLE' is not a Vertex AI scheduling strategy: use STANDARD, SPOT, FLEX_START",
        ),
        (
            "training_capacity: {strategy: LOW_COST}",
            "platform.training_capacity.strategy",
            "'LOW_COST' is deprecated in Vertex AI: use SPOT",
        ),
        (
            "training_capacity: {strategy: FLEX_START, max_wait_duration: 30m}",
            "platform.training_capacity.max_wait_duration",
            "'30m' is not a duration in seconds like 1800s",
        ),
        (
            "training_capacity: {strategy: FLEX_START, max_wait_duration: -60s}",
            "platform.training_capacity.max_wait_duration",
            "'-60s' is not a duration in seconds like 1800s",
        ),
        (
            "training_capacity: {strategy: SPOT, max_wait_duration: 1800s}",
            "platform.training_capacity",
            "max_wait_duration applies to FLEX_START only; Vertex AI refuses it with SPOT",
        ),
        (
            "persistent_resource_id: projects/p/locations/us-east1/persistentResources/pool",
            "platform",
            "persistent_resource_id: 'projects/p/locations/us-east1/persistentResources/pool' is in us-east1; the "
            "training job and the tuning trials run in location us-central1",
        ),
        (
            "persistent_resource_id: Pool_1",
            "platform",
            "persistent_resource_id: 'Pool_1' must be an ID matching [a-z]([a-z0-9-]{0,61}[a-z0-9])? or "
            "projects/P/locations/L/persistentResources/ID",
        ),
        (
            "persistent_resource_id: pool\n  training_capacity: {strategy: SPOT}",
            "platform",
            "persistent_resource_id: the training job and the tuning trials run on the resource's machines, so "
            "training_capacity.strategy SPOT does not apply; leave it STANDARD",
        ),
        (
            "psc_network_attachment: projects/p/regions/europe-west4/networkAttachments/a",
            "platform",
            "psc_network_attachment: 'projects/p/regions/europe-west4/networkAttachments/a' is in europe-west4; the "
            "training job and the tuning trials run in location us-central1",
        ),
        (
            "psc_network_attachment: projects/p/networkAttachments/a",
            "platform",
            "psc_network_attachment: 'projects/p/networkAttachments/a' must be a network attachment's name or "
            "projects/P/regions/REGION/networkAttachments/NAME",
        ),
        (
            "psc_network_attachment: attachment\n  network: projects/123/global/networks/vpc",
            "platform",
            "psc_network_attachment and network are exclusive: a Vertex training job or tuning trial reaches a VPC "
            "through peering or through a Private Service Connect interface, not both",
        ),
        (
            "model_version_aliases: []",
            "platform",
            "model_version_aliases: give at least one alias (the first one marks the champion)",
        ),
        ("keep_previous: -1", "platform.keep_previous", "Input should be greater than or equal to 0 (got -1)"),
        (
            "labels: {goog-team: ml}",
            "platform.labels",
            "goog-team: label keys starting with goog are reserved by Google Cloud",
        ),
        (
            "model_labels: {Kind: cnn}",
            "platform",
            "model_labels: Kind='cnn': keys must match ^[a-z][a-z0-9_-]{0,62}$ and values ^[a-z0-9_-]{0,63}$",
        ),
        (
            # 40 + 22 labels, each under Vertex's 64 alone: with the pipeline's label and source_commit, 64 on every
            # model version
            f"labels: {{{', '.join(f'l{i}: x' for i in range(40))}}}\n"
            f"  model_labels: {{{', '.join(f'm{i}: y' for i in range(22))}}}",
            "platform",
            "labels and model_labels make 64 labels on a Vertex AI model version (with pipeline=<pipeline name> and "
            "source_commit=<commit>); Vertex allows 64, and a pipeline run adds 1 of its own: keep them to 63",
        ),
        (
            "model_labels: {source_commit: abc}",
            "platform",
            "model_labels: source_commit is the label each model version gets from parameters.source_commit on Vertex "
            "AI: use another key",
        ),
        (
            "labels: {source_commit: abc}",
            "platform",
            "labels: source_commit is the label each model version gets from parameters.source_commit on Vertex AI: "
            "use another key",
        ),
    ],
)
def test_platform_validation_names_the_field(tmp_path, setting, field, message):
    (tmp_path / "c.yaml").write_text(f"platform:\n  {setting}\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml", environ={})
    assert str(e.value) == f"invalid configuration: {field}: {message}"


def test_the_training_capacity_persistent_resource_and_psc_interface_as_the_job_takes_them(tmp_path):
    (tmp_path / "c.yaml").write_text(
        "platform:\n"
        "  location: europe-west4\n"
        "  training_capacity: {strategy: FLEX_START, max_wait_duration: 0s}\n"
        "  psc_network_attachment: projects/p/regions/europe-west4/networkAttachments/tfpipe\n"
    )
    platform = load_config(tmp_path / "c.yaml", environ={}).platform
    assert platform.training_capacity.scheduling() == {"strategy": "FLEX_START", "max_wait_duration": "0s"}
    assert platform.psc_interface_config() == {
        "network_attachment": "projects/p/regions/europe-west4/networkAttachments/tfpipe"
    }
    default = load_config(None, environ={}).platform
    assert default.training_capacity.scheduling() == {"strategy": "STANDARD", "max_wait_duration": "86400s"}
    assert (default.psc_interface_config(), default.training_persistent_resource()) == ({}, "")
    (tmp_path / "c.yaml").write_text(
        "platform:\n  persistent_resource_id: projects/p/locations/us-central1/persistentResources/gpu-pool\n"
    )
    assert load_config(tmp_path / "c.yaml", environ={}).platform.training_persistent_resource() == "gpu-pool"


SEGMENT = (
    "one path segment of 1 to 128 ASCII letters, digits, '.', '_' and '-', starting with a letter or digit (no '/', "
    "no '..', no leading '.')"
)
KUBERNETES_NAME = (
    "a Kubernetes name (DNS-1123 label): 1 to 63 lowercase letters, digits and '-', starting and ending with a letter "
    "or digit"
)


@pytest.mark.parametrize(
    "section, setting, field, message",
    [
        ("parameters", "model_name: ../../escape", "parameters.model_name", f"{SEGMENT} (got '../../escape')"),
        ("parameters", "model_name: ''", "parameters.model_name", f"{SEGMENT} (got '')"),
        ("batch", "model_name: .hidden", "batch.model_name", f"{SEGMENT} (got '.hidden')"),
        (
            "parameters",
            "model_repository: s3://bucket/repo",
            "parameters.model_repository",
            "a local path or a gs:// URI (got 's3://bucket/repo')",
        ),
        (
            "parameters",
            "data_source: http://host/data.csv",
            "parameters.data_source",
            "a local path or a gs:// URI or builtin:NAME (got 'http://host/data.csv')",
        ),
        ("parameters", "serving_url: localhost:8501", "parameters.serving_url", "an http:// or https:// URL like "),
        ("batch", "instances: 'a.jsonl,s3://b/c'", "batch.instances", "a local path or a gs:// URI (got 's3://b/c')"),
        ("batch", "output_prefix: /tmp/out", "batch.output_prefix", "a gs:// URI (got '/tmp/out')"),
        ("platform", "kfp_namespace: Team_A", "platform.kfp_namespace", f"{KUBERNETES_NAME} (got 'Team_A')"),
        (
            "platform",
            "kfp_service_account: runner@x",
            "platform.kfp_service_account",
            "a Kubernetes name (DNS-1123 subdomain)",
        ),
        ("platform", "kfp_experiment: ''", "platform.kfp_experiment", "a display name: 1 to 128 characters"),
        ("platform", "model_display_name: ''", "platform.model_display_name", "a display name: 1 to 128"),
        (
            "platform",
            f"endpoint_display_name: {'e' * 129}",
            "platform.endpoint_display_name",
            "a display name: 1 to 128 characters (UTF-8), no control characters",
        ),
        ("platform", 'schedule: {display_name: "a\\nb"}', "platform.schedule.display_name", "a display name"),
        ("platform", "vertex_experiment: My_Exp", "platform.vertex_experiment", "a Vertex AI Experiment name"),
        (
            "platform",
            "kubeflow: {inference_service: my-model-with-a-name-too-long-for-its-knative-tag}",
            "platform.kubeflow.inference_service",
            "a KServe InferenceService name: 1 to 46 lowercase letters",
        ),
        (
            "platform",
            "kubeflow: {volume: {claim_name: My-Claim}}",
            "platform.kubeflow.volume.claim_name",
            "a Kubernetes name (DNS-1123 subdomain)",
        ),
        ("platform", 'kubeflow: {namespace: "ns\\n"}', "platform.kubeflow.namespace", "is not a Kubernetes name"),
    ],
)
def test_names_and_locations_are_checked_on_load_in_one_line(tmp_path, section, setting, field, message):
    (tmp_path / "c.yaml").write_text(f"{section}:\n  {setting}\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml", environ={})
    assert str(e.value).startswith(f"invalid configuration: {field}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_kserves_tensorflow_runtime_is_refused_on_load_in_one_line(tmp_path):
    # TF Serving serves the newest version folder under the model's: a canary could not be told from the champion
    (tmp_path / "c.yaml").write_text("platform:\n  kubeflow: {serving: kserve, predictor: tensorflow}\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml", environ={})
    assert str(e.value) == (
        "invalid configuration: platform.kubeflow.predictor: tensorflow (KServe's TF Serving runtime) is not "
        "supported: TF Serving serves the newest numbered version under the model's folder, so a canary and the "
        "revision a failed rollout restores would serve the same version (and its releases trail the trainer's "
        "TensorFlow); use predictor: serving_image, this project's serving image, which serves one version per "
        "revision"
    )
    assert (
        load_config(None, sets=["platform.kubeflow.predictor=serving_image"], environ={}).platform.kubeflow.predictor
        == "serving_image"
    )


def test_names_that_every_place_takes_load():
    config = load_config(
        None,
        sets=[
            "parameters.model_name=Digits_v2.1",
            "parameters.model_repository=gs://bucket/models",
            "parameters.serving_url=http://tf-serving.models:8501",
            "batch.instances=data/*.jsonl,gs://bucket/more/*.jsonl",
            "batch.output_prefix=gs://bucket/predictions",
            "platform.kfp_namespace=team-a",
            "platform.kfp_service_account=pipeline-runner",
            "platform.model_display_name=Modèle « digits »",
            "platform.vertex_experiment=digits-2026",
            "platform.kubeflow.inference_service=digits",
        ],
        environ={},
    )
    assert config.platform.model_display_name == "Modèle « digits »"


def test_a_refused_name_says_where_it_came_from():
    with pytest.raises(ConfigError, match=r"\(got 'a/b'\) \(from --set parameters.model_name\)$"):
        load_config(None, sets=["parameters.model_name=a/b"], environ={})
    with pytest.raises(ConfigError, match=r"\(got '\.\.'\) \(from TFPIPE_BATCH__MODEL_NAME\)$"):
        load_config(None, environ={"TFPIPE_BATCH__MODEL_NAME": ".."})


@pytest.mark.parametrize(
    "sets, target, message",
    [
        (["parameters.model_name=Digits"], "kubeflow", "parameters.model_name: a KServe InferenceService name"),
        (["parameters.model_name=" + "d" * 47], "kubeflow", "(got '" + "d" * 47 + "'): on kubeflow it names the"),
        (
            ["parameters.model_repository=/data/repo"],
            "kubeflow",
            "parameters.model_repository: on kubeflow with serving: kserve, a gs:// URI or a folder under the volume's "
            "mount path /mnt/tfpipe (got '/data/repo')",
        ),
        (["parameters.model_repository=/mnt/tfpipe/../data"], "kubeflow", "(got '/mnt/tfpipe/../data')"),
        (["parameters.model_name=Digits", "platform.kubeflow.inference_service=digits"], "kubeflow", None),
        (["parameters.model_name=Digits", "platform.kubeflow.serving=url"], "kubeflow", None),
        (["parameters.model_repository=gs://bucket/repo"], "kubeflow", None),
        (["parameters.model_repository=/mnt/tfpipe/repo"], "kubeflow", None),
        (["parameters.model_name=Digits", "parameters.model_repository=/data/repo"], "vertex", None),
        (["parameters.model_name=Digits"], "local", None),
        # on vertex the commit is each model version's label: a SHA-1 fits, upper case or a SHA-256 does not
        (["parameters.source_commit=3f786850e387550fdab836ed7e6dc881de23001b"], "vertex", None),
        (
            ["parameters.source_commit=3F786850"],
            "vertex",
            "parameters.source_commit: '3F786850' is not a Google Cloud label value (it must match "
            "^[a-z0-9_-]{0,63}$): on Vertex AI each model version records it as its label source_commit (a git SHA-1 "
            "fits; abbreviate a longer id, e.g. git rev-parse --short=40 HEAD)",
        ),
        ([f"parameters.source_commit={'a' * 64}"], "vertex", f"parameters.source_commit: '{'a' * 64}' is not a"),
        (["parameters.source_commit=3F786850"], "kubeflow", None),
        (["parameters.source_commit=v1.2-3-g3f78685"], "local", None),
    ],
)
def test_the_names_a_target_adds(sets, target, message):
    config = load_config(None, sets=sets, environ={})
    if message is None:
        config.check_target(target)
        return
    with pytest.raises(ConfigError) as e:
        config.check_target(target)
    assert str(e.value).startswith("invalid configuration: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_the_images_a_run_uses():
    from pipelines.config import Platform

    default = Platform()
    assert default.images_used("vertex") == ["components_image", "trainer_image", "serving_image"]
    # kubeflow: every step on the components image, the TFJob and Katib trials on the trainer image, KServe's
    # predictor on the serving image; with the in-pod engines only the components image
    assert default.images_used("kubeflow") == ["components_image", "trainer_image", "serving_image"]
    in_pod = Platform(kubeflow={"training": "pod", "tuning": "pod", "serving": "url"})
    assert in_pod.images_used("kubeflow") == ["components_image"]
    gpu_workers = Platform(kubeflow={"worker_resources": {"gpus": 1}, "serving": "url"})
    assert gpu_workers.images_used("kubeflow") == ["components_image", "trainer_gpu_image"]
    gpu = Platform(accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1, trainer_image="example.com/trainer:1")
    assert gpu.images_used("vertex") == ["components_image", "trainer_gpu_image", "serving_image"]
    # batch prediction runs its steps on the components image (Vertex: the registered model's own container)
    assert (
        gpu.images_used("vertex", "batch_prediction")
        == gpu.images_used("kubeflow", "batch_prediction")
        == ["components_image"]
    )
    assert gpu.training_image() == "us-docker.pkg.dev/PROJECT/tfpipe/trainer-gpu:latest"
    assert Platform(trainer_image="example.com/trainer:1").training_image() == "example.com/trainer:1"
    assert default.champion_alias == "champion"


def test_every_target_says_what_it_takes_from_the_config():
    from pipelines.config import TARGETS
    from pipelines.config.target_use import TARGET_USE

    assert sorted(TARGET_USE) == sorted(TARGETS)


def test_every_platform_setting_describes_itself():
    """Platform's fields and its nested models' carry a description (the reference page's), ending in a period."""
    from pipelines.config import Platform

    def models(model: type[BaseModel]):
        yield model
        for field in model.model_fields.values():
            for kind in (field.annotation, *typing.get_args(field.annotation)):
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    yield from models(kind)

    nested = set(models(Platform))
    assert {model.__name__ for model in nested} == {
        "Platform",
        "ScheduleSettings",
        "KubeflowSettings",
        "Volume",
        "Resources",
        "DataPrepSettings",
        "StepLimits",
        "TrainingCapacity",
    }
    undescribed = [
        f"{model.__name__}.{name}"
        for model in nested
        for name, field in model.model_fields.items()
        if not (field.description or "").endswith(".")
    ]
    assert undescribed == []


@pytest.mark.parametrize(
    "value",
    [
        "my-project",
        "my-dev-project",
        "gs://my-project-tfpipe/pipeline-root",
        "tfpipe-runner@my-dev-project.iam.gserviceaccount.com",
        "europe-west4-docker.pkg.dev/my-project/tfpipe/trainer:latest",
        "https://europe-west4-kfp.pkg.dev/my-dev-project/tfpipe-templates",
        "us-docker.pkg.dev/PROJECT/tfpipe/components:latest",
        "gs://BUCKET/pipeline-root",
        "https://REGION-kfp.pkg.dev/PROJECT/REPO",
        "projects/PROJECT/locations/europe-west4/keyRings/ml/cryptoKeys/tfpipe",
        "runner@example.com",
        "http://kubeflow.example.org:8080",
    ],
)
def test_example_values_are_recognised(value):
    from pipelines.config import EXAMPLE_VALUE

    assert EXAMPLE_VALUE.search(value)


@pytest.mark.parametrize(
    "value",
    [
        "my-project-384512",  # the id Google Cloud generates for a project named "My Project"
        "gs://my-project-384512-tfpipe/pipeline-root",
        "acme-my-project",
        "gs://acme-ml-prod-tfpipe/pipeline-root",
        "europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/trainer@sha256:" + "0" * 64,
        "projects/123456789/global/networks/vpc",
        "http://localhost:8080",
        "https://kubeflow.example.company.com",
        "gs://acme-data/Projects/PROJECTION/file.csv",
    ],
)
def test_real_values_are_not_taken_for_examples(value):
    from pipelines.config import EXAMPLE_VALUE

    assert not EXAMPLE_VALUE.search(value)


def test_the_fields_a_command_sends_to_the_cloud():
    config = load_config(None, environ={})
    assert config.cloud_fields("vertex", compiling=True, running=True, registry=True) == [
        "platform.project",
        "platform.pipeline_root",
        "platform.service_account",
        "platform.network",
        "platform.encryption_spec_key_name",
        "platform.components_image",
        "platform.trainer_image",
        "platform.serving_image",
        "platform.tensorboard",
        "platform.persistent_resource_id",
        "platform.psc_network_attachment",
        "platform.template_registry",
        "parameters.data_source",
    ]
    # a run of a compiled template: what the run request carries; compile: what the template bakes in
    assert config.cloud_fields("vertex", running=True) == [
        "platform.project",
        "platform.pipeline_root",
        "platform.service_account",
        "platform.network",
        "platform.encryption_spec_key_name",
    ]
    assert config.cloud_fields("vertex", "batch_prediction", compiling=True) == [
        "platform.service_account",
        "platform.network",
        "platform.encryption_spec_key_name",
        "platform.components_image",
        "batch.instances",
        "batch.model",
        "batch.output_prefix",
    ]
    assert config.cloud_fields("kubeflow", compiling=True, running=True) == [
        "platform.pipeline_root",
        "platform.kfp_host",
        "platform.components_image",
        "platform.trainer_image",
        "platform.serving_image",
        "parameters.data_source",
        "parameters.model_repository",
        "parameters.serving_url",
    ]
    assert config.cloud_fields("kubeflow", "batch_prediction", registry=True) == ["platform.template_registry"]


def test_example_values_name_the_field_and_value():
    config = load_config(
        None,
        sets=[
            "platform.project=my-project",
            "platform.kfp_host=https://kubeflow.example.com",
            "platform.components_image=europe-west4-docker.pkg.dev/acme-ml/tfpipe/components:1",
            "parameters.data_source=gs://my-project-tfpipe/data",
            "parameters.model_repository=/mnt/PROJECT/models",  # a local path: never sent anywhere
        ],
        environ={},
    )
    fields = config.cloud_fields("kubeflow", compiling=True, running=True) + ["platform.project"]
    assert config.example_values(fields) == [
        "platform.kfp_host=https://kubeflow.example.com",
        "platform.trainer_image=us-docker.pkg.dev/PROJECT/tfpipe/trainer:latest",
        "platform.serving_image=us-docker.pkg.dev/PROJECT/tfpipe/serving:latest",
        "parameters.data_source=gs://my-project-tfpipe/data",
        "platform.project=my-project",
    ]


@pytest.mark.parametrize(
    "setting, field, message",
    [
        (
            "max_failed_trial_count: 0",
            "study.max_failed_trial_count",
            "must be at least 1 (the study fails once this many trials have failed), got 0; 0 (Vertex decides) has no "
            "self-hosted equivalent",
        ),
        # the default search space has a double range (learning_rate)
        (
            "algorithm: grid",
            "study",
            "algorithm grid takes integer, categorical and discrete parameters only (Vertex's GRID_SEARCH refuses double "
            "ranges); double: learning_rate (list their values as type: discrete)",
        ),
        (
            "metric_id: val_f1",
            "study.metric_id",
            "the trainer logs no metric 'val_f1'; it logs val_accuracy, val_loss, accuracy, loss",
        ),
        ("metric_id: val_loss", "study", "goal maximize would pick the worst trial by val_loss: use goal minimize"),
        (
            "{metric_id: accuracy, goal: minimize}",
            "study",
            "goal minimize would pick the worst trial by accuracy: use goal maximize",
        ),
    ],
)
def test_study_validation_names_the_field(tmp_path, setting, field, message):
    (tmp_path / "c.yaml").write_text(f"study:\n  {setting}\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml", environ={})
    assert str(e.value) == f"invalid configuration: {field}: {message}"
    assert load_config(None, environ={}).study.max_failed_trial_count == 1


def test_a_study_on_a_training_metric_is_warned_of_in_one_line_and_a_validation_metric_is_not(tmp_path):
    from components.lib.study.spec import TRAINING_METRIC

    (tmp_path / "c.yaml").write_text("study:\n  metric_id: loss\n  goal: minimize\n")
    with pytest.warns(UserWarning) as warned:
        assert load_config(tmp_path / "c.yaml", environ={}).study.metric_id == "loss"
    assert [str(w.message) for w in warned] == [TRAINING_METRIC.format("loss")]
    assert "\n" not in str(warned[0].message) and "val_loss is the validation split's" in str(warned[0].message)
    (tmp_path / "c.yaml").write_text("study:\n  metric_id: val_loss\n  goal: minimize\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(tmp_path / "c.yaml", environ={}).study.metric_id == "val_loss"


def test_errors_say_where_an_override_came_from(config_file):
    with pytest.raises(ConfigError) as e:
        load_config(config_file, environ={"TFPIPE_PLATFORM__LOCATION": "mars"})
    assert str(e.value) == (
        "invalid configuration: platform.location: 'mars' is not a Google Cloud region like "
        "us-central1 or europe-west4 (from TFPIPE_PLATFORM__LOCATION)"
    )
    with pytest.raises(ConfigError) as e:
        load_config(config_file, sets=["parameters.epochs=many", "platform.regoin=x"], environ={})
    assert str(e.value) == (
        "invalid configuration: parameters.epochs: Input should be a valid integer, unable to parse string as an "
        "integer (got 'many') (from --set parameters.epochs); platform.regoin: Extra inputs are not permitted "
        "(got 'x') (from --set platform.regoin)"
    )
    (config_file.parent / "p.yaml").write_text("profiles:\n  dev:\n    parameters: {workers: 0}\n")
    with pytest.raises(ConfigError) as e:
        load_config(config_file.parent / "p.yaml", profile="dev", environ={})
    assert str(e.value) == (
        "invalid configuration: parameters.workers: Input should be greater than or equal to 1 "
        "(got 0) (from profile dev)"
    )


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match=r"^--set platform.trainer_image: expected SECTION.FIELD=VALUE"):
        parse_set("platform.trainer_image")
    with pytest.raises(
        ConfigError,
        match=r"^--set image=x: 'image' is not a section; use one of: parameters, "
        r"batch, platform, study, trainer$",
    ):
        parse_set("image=x")
    with pytest.raises(
        ConfigError,
        match=r"^TFPIPE_PLATFORM_TRAINER_IMAGE: separate the section and the field "
        r"with two underscores, like TFPIPE_PLATFORM__TRAINER_IMAGE$",
    ):
        env_overrides({"TFPIPE_PLATFORM_TRAINER_IMAGE": "x"})
    with pytest.raises(ConfigError, match=r"^TFPIPE_PLATFORM__: name a field after the section"):
        env_overrides({"TFPIPE_PLATFORM__": "x"})
    with pytest.raises(ConfigError, match=r"^--set platform.project.id: platform.project is not a mapping$"):
        load_config(None, sets=["platform.project=abcdef", "platform.project.id=x"], environ={})
    found = env_overrides(
        {
            "TFPIPE_PLATFORM__SCHEDULE__CRON": "0 3 * * 1",
            "TFPIPE_STUDY__MAX_TRIAL_COUNT": "8",
            "TFPIPE_PROFILE": "dev",
            "OTHER": "1",
        }
    )
    assert [(o.path, o.value, o.source) for o in found] == [
        (("platform", "schedule", "cron"), "0 3 * * 1", "TFPIPE_PLATFORM__SCHEDULE__CRON"),
        (("study", "max_trial_count"), "8", "TFPIPE_STUDY__MAX_TRIAL_COUNT"),
    ]
    assert parse_set("platform.model_version_aliases=[champion, blue]").value == ["champion", "blue"]
    assert parse_set("platform.labels={team: ml}").value == {"team": "ml"}
    assert parse_set("parameters.data_source=gs://b/x=y").value == "gs://b/x=y"


def test_cron_expressions():
    cron = parse_cron("  TZ=Europe/Paris   0 3 * * 1 ")
    assert (str(cron), cron.fields, cron.zone, cron.prefix) == (
        "TZ=Europe/Paris 0 3 * * 1",
        "0 3 * * 1",
        "Europe/Paris",
        "TZ",
    )
    assert str(parse_cron("CRON_TZ=America/New_York 30 2 1 * *")) == "CRON_TZ=America/New_York 30 2 1 * *"
    assert str(parse_cron("*/15 * * * *")) == "*/15 * * * *"
    # Monday 03:00 in Paris: 02:00 UTC in winter (CET), 01:00 UTC in summer (CEST)
    after = datetime(2026, 3, 20, tzinfo=UTC)
    assert [t.isoformat() for t in cron.next_runs(3, after)] == [
        "2026-03-23T03:00:00+01:00",
        "2026-03-30T03:00:00+02:00",
        "2026-04-06T03:00:00+02:00",
    ]
    for bad, message in [
        ("", "a cron expression is required"),
        ("0 3 * * 1 2026", "has 6 field(s); a cron expression has 5"),
        ("61 3 * * 1", "'61 3 * * 1' is not a valid cron expression"),
        ("@daily", "'@daily' has 1 field(s)"),
        ("TZ=Europe/Paris", "the time zone prefix must be followed by the five cron fields"),
        ("TZ=Nowhere/City 0 3 * * 1", "unknown time zone 'Nowhere/City'"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_cron(bad)


def test_cloud_build_compile_command(config_file, tmp_path, monkeypatch):
    """The exact command cloudbuild.yaml runs: a profile plus --set image overrides, the pushed images by digest
    (so no warning about tags)."""
    for name in [n for n in os.environ if n.startswith("TFPIPE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TFPIPE_PARAMETERS__TUNE", "false")
    out = tmp_path / "build" / "training.yaml"
    trainer = "europe-west4-docker.pkg.dev/my-prod-project/tfpipe/trainer@sha256:" + "1" * 64
    components = "europe-west4-docker.pkg.dev/my-prod-project/tfpipe/components@sha256:" + "2" * 64
    serving = "europe-west4-docker.pkg.dev/my-prod-project/tfpipe/serving@sha256:" + "3" * 64
    result = CliRunner().invoke(
        cli,
        [
            "compile",
            "--target",
            "vertex",
            "--pipeline",
            "training",
            "--config",
            str(config_file),
            "--profile",
            "prod",
            "--set",
            f"platform.trainer_image={trainer}",
            "--set",
            f"platform.components_image={components}",
            "--set",
            f"platform.serving_image={serving}",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output == f"compiled vertex training pipeline to {out}\n"
    spec = yaml.safe_load(out.read_text())
    inputs = spec["root"]["inputDefinitions"]["parameters"]
    assert (inputs["epochs"]["defaultValue"], inputs["workers"]["defaultValue"], inputs["tune"]["defaultValue"]) == (
        7,
        3,
        False,
    )
    executors = spec["deploymentSpec"]["executors"]
    assert executors["exec-prepare-data"]["container"]["image"] == components
    plan = spec["root"]["dag"]["tasks"]["plan-vertex-training-2"]["inputs"]["parameters"]
    assert plan["trainer_image"]["runtimeValue"]["constant"] == trainer
    assert (
        spec["root"]["dag"]["tasks"]["custom-training-job"]["inputs"]["parameters"]["location"]["runtimeValue"][
            "constant"
        ]
        == "europe-west4"
    )
    # errors are one line naming the field
    result = CliRunner().invoke(
        cli,
        [
            "compile",
            "--target",
            "vertex",
            "--config",
            str(config_file),
            "--profile",
            "prod",
            "--set",
            "platform.location=eu",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 1
    assert result.output == (
        "Error: invalid configuration: platform.location: 'eu' is not a Google Cloud region "
        "like us-central1 or europe-west4 (from --set platform.location)\n"
    )
    result = CliRunner().invoke(
        cli, ["compile", "--target", "vertex", "--config", str(config_file), "--profile", "stage", "--output", str(out)]
    )
    assert result.output == (f"Error: unknown profile 'stage': config file {config_file} defines profiles: dev, prod\n")


def test_run_takes_profiles_and_sets(config_file, tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("TFPIPE_")]:
        monkeypatch.delenv(name)
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--config",
            str(config_file),
            "--profile",
            "dev",
            "--set",
            "parameters.workers=0",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 1
    assert result.output == (
        "Error: invalid configuration: parameters.workers: Input should be greater than or equal "
        "to 1 (got '0') (from --set parameters.workers)\n"
    )
    result = CliRunner().invoke(cli, ["run", "--set", "workers=2", "--out", str(tmp_path / "o")])
    assert result.output == (
        "Error: --set workers=2: 'workers' is not a section; use one of: parameters, batch, platform, study, trainer\n"
    )


@pytest.mark.parametrize("profile", ["dev", "prod"])
def test_shipped_config_loads_and_compiles_for_every_profile_once_edited(profile, tmp_path):
    assert profile_names(SHIPPED) == ["dev", "prod"]
    shipped = load_config(SHIPPED, profile=profile, environ={})
    assert shipped.platform.project == {"dev": "my-dev-project", "prod": "my-project"}[profile]
    edited = edited_shipped_config(tmp_path)
    config = load_config(edited, profile=profile, environ={})
    assert config.platform.project == {"dev": "acme-ml-dev", "prod": "acme-ml-prod"}[profile]
    assert config.platform.labels == {"team": "ml", "env": profile}
    for target in ("vertex", "kubeflow"):  # no example value left in any field a command sends
        for pipeline in PIPELINES:
            fields = config.cloud_fields(target, pipeline, compiling=True, running=True, registry=True)
            assert config.example_values(fields) == []
    out = tmp_path / "training.yaml"
    result = CliRunner().invoke(
        cli, ["compile", "--target", "vertex", "--config", str(edited), "--profile", profile, "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(out.read_text())
    assert spec["root"]["inputDefinitions"]["parameters"]["epochs"]["defaultValue"] == {"dev": 3, "prod": 40}[profile]


@pytest.mark.parametrize(
    "section, setting, message",
    [
        (
            "batch",
            "{instances: 'bq://my-project.shop.rows', instances_format: jsonl}",
            "batch: instances bq://my-project.shop.rows is a BigQuery table: set instances_format bigquery (jsonl "
            "instances are files)",
        ),
        (
            "batch",
            "{instances: 'gs://b/a.jsonl', instances_format: bigquery}",
            "batch: instances_format bigquery reads a BigQuery table: give instances as bq://PROJECT.DATASET.TABLE",
        ),
        (
            "batch",
            "{instances: 'bq://my-project.shop', instances_format: bigquery}",
            "batch.instances: a BigQuery table bq://PROJECT.DATASET.TABLE (got 'bq://my-project.shop')",
        ),
        (
            "batch",
            "{output_prefix: 'bq://my-project.a.b'}",
            "batch.output_prefix: a gs:// URI, or a BigQuery project bq://PROJECT or dataset bq://PROJECT.DATASET "
            "(got 'bq://my-project.a.b')",
        ),
        (
            "platform",
            "{batch_accelerator_type: NVIDIA_TESLA_T4}",
            "platform: batch_accelerator_type and batch_accelerator_count must be set together",
        ),
        (
            "platform",
            "{batch_accelerator_type: NVIDIA_T4, batch_accelerator_count: 1}",
            "platform: batch_accelerator_type 'NVIDIA_T4' is not an AcceleratorType of Vertex AI (NVIDIA_TESLA_K80, "
            "NVIDIA_TESLA_P100, NVIDIA_TESLA_V100, NVIDIA_TESLA_P4, NVIDIA_TESLA_T4, NVIDIA_TESLA_A100, "
            "NVIDIA_A100_80GB, NVIDIA_L4, NVIDIA_H100_80GB, NVIDIA_H100_MEGA_80GB, NVIDIA_H200_141GB, NVIDIA_B200, "
            "NVIDIA_GB200, NVIDIA_RTX_PRO_6000, TPU_V2, TPU_V3, TPU_V4_POD, TPU_V5_LITEPOD)",
        ),
        (
            "platform",
            "{batch_accelerator_type: NVIDIA_L4, batch_accelerator_count: 1}",
            "platform: batch_accelerator_type NVIDIA_L4 attaches to g2-* machines, not batch_machine_type "
            "'n1-standard-4'",
        ),
    ],
)
def test_bigquery_batch_and_batch_accelerators_are_checked_on_load_in_one_line(tmp_path, section, setting, message):
    (tmp_path / "c.yaml").write_text(f"{section}: {setting}\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.yaml", environ={})
    assert str(e.value) == f"invalid configuration: {message}"


def test_a_bigquery_batch_on_gpus_loads():
    config = load_config(
        None,
        sets=[
            "batch.instances=bq://my-project.shop.rows",
            "batch.instances_format=bigquery",
            "batch.output_prefix=bq://my-project",
            "platform.batch_machine_type=g2-standard-8",
            "platform.batch_accelerator_type=NVIDIA_L4",
            "platform.batch_accelerator_count=1",
        ],
        environ={},
    )
    assert (config.batch.instances, config.batch.output_prefix) == ("bq://my-project.shop.rows", "bq://my-project")
    assert (config.platform.batch_accelerator_type, config.platform.batch_accelerator_count) == ("NVIDIA_L4", 1)
