"""Katib v0.19's controllers for an Experiment whose trials are batch Jobs, as a step sees them (rules in katib.py):

- the suggestion: values drawn from each parameter's feasible space (uniform, or log-uniform for `logUniform`, but
  as skopt draws under `bayesianoptimization`: ints uniform, doubles log-uniform; a seeded draw stands in for every
  algorithm's own search); for `bayesianoptimization` the skopt service first builds its search space, and when
  that raises (a double reaching 0) every suggestion request fails: no trial is ever created and the experiment
  keeps only its Created condition; for `grid` the service first validates the settings, and more trials than
  combinations fail the Suggestion and the experiment ("Suggestion has failed"), no trial created;
- trials `<experiment>-<8 characters>`, each a Job from the trial template with `${trialParameters.*}` substituted,
  checked against Kubernetes' Job schema, its pod admitted by Katib's pod webhook (the primary container's command
  wrapped for the File collector; no `command` and an image the webhook cannot read from a registry: the pod is
  refused, and the Job keeps retrying without a pod), then by Pod Security admission in a namespace that enforces
  `restricted` (a violation refuses the pod: the Job's FailedCreate event quotes the API server, and the Job stays
  without a pod), and run by the kubelet double with the collector's emptyDir; each refusal is a `FailedCreate`
  event on the Job in the server's events (`record_event`) and in `events`; a trial is Running once its Job exists
  (Katib's trial controller: pkg/controller.v1beta1/trial/util/job_util.go), whether or not its pod was admitted;
- the File collector parses the metrics file (JSON format); a trial succeeds, fails, or has its metrics unavailable;
- once a trial has finished, its Job is deleted (foreground: its pod and the pod's log go with it) unless the trial
  template says `retain: true` (the trial's `RetainRun`: pkg/controller.v1beta1/trial/trial_controller.go); the
  pods carry the Job controller's `batch.kubernetes.io/job-name` label, the trial's name; an Experiment deleted
  takes its trials, their Jobs and pods;
- the experiment's counters and trial lists (`failedTrialList`, ..., sorted by name as Katib lists trials),
  `currentOptimalTrial`, and its conditions: Succeeded when the trials reach
  `maxTrialCount`, Failed once failed trials reach `maxFailedTrialCount`.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
from dataclasses import dataclass, field

from tests.doubles.k8s import admission, katib, schema
from tests.doubles.k8s.server import now

EXPERIMENTS = ("kubeflow.org/v1beta1", "experiments")
TRIALS = ("kubeflow.org/v1beta1", "trials")
JOB_NAME = "batch.kubernetes.io/job-name"  # the label the Job controller gives a Job's pods
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class Trial:
    name: str
    assignments: list
    pod: object = None
    state: str = "Pending"  # Pending, Running, Succeeded, Failed, MetricsUnavailable
    metrics: list = field(default_factory=list)  # [{name, min, max, latest}]
    refused: str = ""
    metrics_file: str = ""
    pod_name: str = ""
    deleted: bool = False  # its Job (and pod) deleted once it finished


@dataclass
class Study:
    trials: list = field(default_factory=list)
    conditions: list = field(default_factory=list)
    suggestion_error: str = ""
    validation_error: str = ""
    done: bool = False


class KatibOperator:
    def __init__(self, kubelet, readable_images: dict[str, list[str]] | None = None, seed: int = 0):
        """`readable_images`: image -> ENTRYPOINT, for the images the pod webhook can read from a registry (none by
        default: images loaded into the nodes, or private without pull secrets)."""
        self.kubelet, self.readable = kubelet, dict(readable_images or {})
        self.random = random.Random(seed)
        self.studies: dict[tuple, Study] = {}
        self.events: list[str] = []

    def close(self):
        for study in self.studies.values():
            for trial in study.trials:
                if trial.pod is not None:
                    trial.pod.stop()

    def reconcile(self, api) -> None:
        for key, obj in list(api.objects.items()):
            if (key[0], key[2]) == EXPERIMENTS:
                self._reconcile(api, key, obj)
        for key in [k for k in self.studies if k not in api.objects]:
            study = self.studies.pop(key)
            for trial in study.trials:
                self._delete_job(api, trial)
                api.remove((TRIALS[0], key[1], TRIALS[1], trial.name))

    @staticmethod
    def _delete_job(api, trial: Trial) -> None:
        """The trial's Job deleted with foreground propagation: its pod stopped and gone, the pod's log with it."""
        if trial.pod is not None and not trial.deleted:
            trial.pod.stop()
            api.pods[:] = [p for p in api.pods if p["metadata"]["labels"].get(JOB_NAME) != trial.name]
            api.logs.pop(trial.pod_name, None)
        trial.deleted = True

    def _set(self, study: Study, kind: str, reason: str, message: str, status: str = "True"):
        if any((c["type"], c["status"], c["reason"]) == (kind, status, reason) for c in study.conditions):
            return
        study.conditions = [c for c in study.conditions if c["type"] != kind]
        study.conditions.append(
            {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now()}
        )

    def _reconcile(self, api, key, obj):
        _, ns, _, name = key
        if "deletionTimestamp" in obj["metadata"]:
            return  # reconcile() stops its trials once the server has removed it
        spec = obj["spec"]
        study = self.studies.get(key)
        if study is None:
            study = self.studies[key] = Study()
            self._set(study, "Created", "ExperimentCreated", "Experiment is created")
            self._validate(ns, name, spec, study)
            if spec["algorithm"]["algorithmName"] == "bayesianoptimization":
                study.suggestion_error = next(filter(None, map(katib.skopt_dimension_error, spec["parameters"])), "")
                if study.suggestion_error:
                    self.events.append(
                        f"Suggestion {ns}/{name}: ReconcileError: rpc error: code = Unknown desc = Exception calling "
                        f"application: {study.suggestion_error}"
                    )
        if study.done:
            return
        for trial in study.trials:
            self._follow(api, trial, spec)
            if trial.state not in ("Pending", "Running") and not spec["trialTemplate"].get("retain"):
                self._delete_job(api, trial)
        if not study.suggestion_error and not study.validation_error:
            self._create_trials(api, ns, name, spec, study)
        self._status(api, key, spec, study)

    def _validate(self, ns, name, spec, study: Study):
        """The suggestion controller's ValidateAlgorithmSettings call: a refusal marks the Suggestion failed."""
        if spec["algorithm"]["algorithmName"] == "grid":
            study.validation_error = katib.grid_validation_error(spec)
        if study.validation_error:
            self.events.append(
                f"Suggestion {ns}/{name}: SuggestionFailed: Validation failed: ValidateAlgorithmSettings Error: "
                f"{study.validation_error}"
            )

    def _create_trials(self, api, ns, name, spec, study: Study):
        states = [t.state for t in study.trials]
        active = states.count("Pending") + states.count("Running")
        completed = len(states) - active
        wanted = min(spec["parallelTrialCount"], spec["maxTrialCount"] - completed) - active
        for _ in range(max(wanted, 0)):
            trial_name = f"{name}-{''.join(self.random.choice(ALPHABET) for _ in range(8))}"
            algorithm = spec["algorithm"]["algorithmName"]
            assignments = [{"name": p["name"], "value": self._draw(algorithm, p)} for p in spec["parameters"]]
            trial = Trial(trial_name, assignments)
            study.trials.append(trial)
            api.create_owned(
                (TRIALS[0], ns, TRIALS[1], trial_name),
                {
                    "apiVersion": TRIALS[0],
                    "kind": "Trial",
                    "metadata": {
                        "name": trial_name,
                        "namespace": ns,
                        "labels": {**obj_labels(api, ns, name), "katib.kubeflow.org/experiment": name},
                    },
                    "spec": {
                        "parameterAssignments": assignments,
                        **({"retainRun": True} if spec["trialTemplate"].get("retain") else {}),
                    },
                },
            )
            self._start(api, ns, name, spec, trial)

    def _draw(self, algorithm: str, parameter: dict) -> str:
        feasible, kind = parameter["feasibleSpace"], parameter["parameterType"]
        if kind in ("categorical", "discrete"):
            return self.random.choice(feasible["list"])
        low, high = float(feasible["min"]), float(feasible["max"])
        if katib.sampled_distribution(algorithm, parameter) == "logUniform":
            value = math.exp(self.random.uniform(math.log(low), math.log(high)))
        else:
            value = self.random.uniform(low, high)
        return str(round(value)) if kind == "int" else repr(value)

    def _start(self, api, ns, name, spec, trial: Trial):
        template = spec["trialTemplate"]
        text = json.dumps(template["trialSpec"])
        values = {a["name"]: a["value"] for a in trial.assignments}
        for p in template["trialParameters"]:
            reference = p["reference"]
            value = (
                trial.name
                if reference == "${trialSpec.Name}"
                else ns
                if reference == "${trialSpec.Namespace}"
                else values[reference]
            )
            text = text.replace(f"${{trialParameters.{p['name']}}}", value)
        job = json.loads(text)
        job["metadata"] = {**(job.get("metadata") or {}), "name": trial.name, "namespace": ns}
        errors = schema.core_errors(job)
        assert not errors, f"trial Job {trial.name} is invalid: {errors}"
        trial.state = "Running"  # Katib's trial controller: a trial runs once its Job exists, pod or not
        pod_template = copy.deepcopy(job["spec"]["template"])
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{trial.name}-{''.join(self.random.choice(ALPHABET) for _ in range(5))}",
                "namespace": ns,
                "labels": {
                    **(pod_template.get("metadata") or {}).get("labels", {}),
                    "katib.kubeflow.org/experiment": name,
                    "katib.kubeflow.org/trial": trial.name,
                    JOB_NAME: trial.name,
                },
                "annotations": (pod_template.get("metadata") or {}).get("annotations", {}),
            },
            "spec": pod_template["spec"],
        }
        primary = template["primaryContainerName"]
        containers = pod["spec"]["containers"]
        index = next((i for i, c in enumerate(containers) if c["name"] == primary), None)
        if index is None:
            self._refuse(api, ns, trial, f"Unable to find primary container {primary} in mutated pod containers")
            return
        collector = spec["metricsCollectorSpec"]["source"]["fileSystemPath"]["path"]
        container = containers[index]
        try:
            command, args = katib.wrapped_command(container, collector, self.readable.get(container["image"]))
        except PermissionError as e:
            self._refuse(api, ns, trial, f'admission webhook "mutator.pod.katib.kubeflow.org" denied the request: {e}')
            return
        folder = os.path.dirname(collector)
        containers[index] = {
            **container,
            "command": command,
            "args": args,
            "volumeMounts": [*(container.get("volumeMounts") or []), {"name": "metrics-volume", "mountPath": folder}],
        }
        pod["spec"] = {
            **pod["spec"],
            "volumes": [*(pod["spec"].get("volumes") or []), {"name": "metrics-volume", "emptyDir": {}}],
            "shareProcessNamespace": True,
        }
        labels = (api.namespaces or {}).get(ns) or {}
        if denied := admission.pod_security_denial(pod["metadata"]["name"], pod["spec"], labels):
            self._refuse(api, ns, trial, f"Error creating: {denied}")
            return
        api.pods.append(pod)
        trial.pod = self.kubelet.start(pod, primary)
        trial.pod_name = pod["metadata"]["name"]
        trial.metrics_file = collector

    def _refuse(self, api, ns: str, trial: Trial, message: str) -> None:
        """The Job controller could not create the trial's pod: its FailedCreate event on the Job; no pod."""
        trial.refused = message
        self.events.append(f"Job {ns}/{trial.name}: FailedCreate: {message}")
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": trial.name, "namespace": ns}}
        api.record_event(job, "FailedCreate", message, "job-controller")

    def _follow(self, api, trial: Trial, spec):
        if trial.state != "Running" or trial.pod is None:
            return
        code = trial.pod.process.poll()
        api.logs[trial.pod_name] = trial.pod.log()
        if code is None:
            return
        if code != 0:
            trial.state = "Failed"
            return
        host_file = trial.pod.host_path(trial.metrics_file)
        names = [spec["objective"]["objectiveMetricName"], *(spec["objective"].get("additionalMetricNames") or [])]
        try:
            with open(host_file) as f:
                logs = katib.parse_json_metrics(f.read(), names)
        except (OSError, ValueError):
            logs = [{"name": names[0], "value": "unavailable"}]
        values = [log["value"] for log in logs if log["name"] == names[0]]
        if values == ["unavailable"]:
            trial.state = "MetricsUnavailable"
            return
        numbers = [float(v) for v in values]
        trial.metrics = [{"name": names[0], "min": str(min(numbers)), "max": str(max(numbers)), "latest": values[-1]}]
        trial.state = "Succeeded"

    def _status(self, api, key, spec, study: Study):
        counts = {
            s: [t for t in study.trials if t.state == s]
            for s in ("Pending", "Running", "Succeeded", "Failed", "MetricsUnavailable")
        }
        status: dict = {"startTime": study.conditions[0]["lastTransitionTime"]}
        for field_name, state in (
            ("trialsPending", "Pending"),
            ("trialsRunning", "Running"),
            ("trialsSucceeded", "Succeeded"),
            ("trialsFailed", "Failed"),
            ("trialMetricsUnavailable", "MetricsUnavailable"),
        ):
            if counts[state]:
                status[field_name] = len(counts[state])
        for field_name, states in (
            ("runningTrialList", ("Running",)),
            ("succeededTrialList", ("Succeeded",)),
            ("failedTrialList", ("Failed",)),
            ("metricsUnavailableTrialList", ("MetricsUnavailable",)),
        ):
            if names := sorted(t.name for state in states for t in counts[state]):
                status[field_name] = names
        if study.trials:
            status["trials"] = len(study.trials)
            self._set(study, "Running", "ExperimentRunning", "Experiment is running")
        objective = spec["objective"]
        strategy = next(
            s["value"] for s in objective["metricStrategies"] if s["name"] == objective["objectiveMetricName"]
        )
        scored = [(float(t.metrics[0][strategy]), t) for t in counts["Succeeded"]]
        if scored:
            best = (max if objective["type"] == "maximize" else min)(scored, key=lambda s: s[0])[1]
            status["currentOptimalTrial"] = {
                "bestTrialName": best.name,
                "parameterAssignments": best.assignments,
                "observation": {"metrics": best.metrics},
            }
        failed = len(counts["Failed"]) + len(counts["MetricsUnavailable"])
        completed = len(study.trials) - len(counts["Pending"]) - len(counts["Running"])
        limit = spec.get("maxFailedTrialCount")
        if study.validation_error:
            self._finish(study, "Failed", "ExperimentFailed", "Suggestion has failed")
        elif limit is not None and failed and failed >= limit:
            self._finish(
                study, "Failed", "ExperimentFailed", "Experiment has failed because max failed count has reached"
            )
        elif completed >= spec["maxTrialCount"]:
            self._finish(
                study,
                "Succeeded",
                "ExperimentMaxTrialsReached",
                "Experiment has succeeded because max trial count has reached",
            )
        status["conditions"] = [dict(c) for c in study.conditions]
        api.write_status(key, status)

    def _finish(self, study: Study, kind: str, reason: str, message: str):
        for c in study.conditions:
            if c["type"] == "Running":
                c["status"] = "False"
        self._set(study, kind, reason, message)
        study.done = True


def obj_labels(api, ns: str, name: str) -> dict:
    return dict((api.get("experiments", name, ns) or {}).get("metadata", {}).get("labels") or {})
