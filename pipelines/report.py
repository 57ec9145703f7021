"""Run output: `run_summary.json`, PNG plots (training curves, confusion matrix) and `report.html`."""
from __future__ import annotations

import json
from pathlib import Path

import jinja2


def _json(path: Path | None):
    return json.loads(path.read_text()) if path and path.is_file() else None


def _history(path: Path | None) -> list[dict]:
    if not path or not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _output(run_root: Path | None, step: str, *names: str) -> Path | None:
    """Path of a step's output artifact in the kfp.local pipeline root (`<root>/<step>/<output>/...`)."""
    return run_root.joinpath(step, *names) if run_root else None


def _artifact_metadata(run_root: Path | None, task: str, output: str) -> dict:
    """The metadata a kfp.local step recorded for one of its output artifacts (its executor_output.json)."""
    executor_output = _json(_output(run_root, task, "executor_output.json")) or {}
    artifacts = executor_output.get("artifacts", {}).get(output, {}).get("artifacts") or [{}]
    return artifacts[0].get("metadata", {})


def _endpoint(deployed: dict | None) -> dict | None:
    """The deploy step's endpoint record; a reused server (started by an earlier run) or a server at a URL has
    no pid, log or stop command of this run's making, so those may be missing."""
    if not deployed:
        return None
    version = deployed.get("version")
    return {"rest_url": deployed["rest_url"], "grpc_target": deployed.get("grpc_target") or None,
            "served_version": int(version) if version is not None else None,
            "model_name": deployed.get("model_name"), "started_by_this_run": bool(deployed.get("started")),
            "pid": deployed.get("pid"), "log": deployed.get("log"), "stop": deployed.get("stop") or None}


def _batch(run_root: Path | None) -> dict | None:
    metadata = _artifact_metadata(run_root, "run-batch-prediction", "predictions")
    if not metadata:
        return None
    return {k: metadata.get(k) for k in ("output_directory", "model", "instances", "succeeded", "failed", "files",
                                         "seconds", "instances_per_second")}


def tuning(study_dir: Path | None) -> dict | None:
    """The study's section from the folder its results were written to (trials.json, trials.png)."""
    if study_dir is None:
        return None
    study = _json(study_dir / "trials.json")
    return study and {"enabled": study.get("enabled", True), "trials": study["trials"],
                      "failed_trials": study.get("failed_trials", 0), "best": study.get("best"),
                      "seconds": study.get("seconds"), "metric_id": (study.get("spec") or {}).get("metric_id"),
                      "plot": str(study_dir / "trials.png")}


def collect(run_root: Path | None, steps, pipeline_name: str, parameters: dict, seconds: float) -> dict:
    """Assemble the run summary from the steps' statuses and their output artifacts."""
    failed = [s for s in steps if s.status == "FAILED"]
    stats = _json(_output(run_root, "prepare-data", "dataset", "stats.json"))
    # the step whose `training` output holds the metrics: train-model (self-hosted) or import-trained-model (vertex)
    trained_by = "import-trained-model" if run_root and (run_root / "import-trained-model").is_dir() else "train-model"
    training = _json(_output(run_root, trained_by, "training", "metrics.json"))
    evaluation = _json(_output(run_root, "evaluate-model", "evaluation"))
    published = _json(_output(run_root, "publish-model", "published")) or {}
    tflite = _json(_output(run_root, "quantize-model", "quantization"))
    study_dir = _output(run_root, "tune-hyperparameters", "tuning")
    summary = {
        "pipeline": pipeline_name,
        "status": "FAILED" if failed or not run_root else "SUCCEEDED",
        "error": next((f"{s.name}: {s.error}" for s in failed if s.error), None),
        "seconds": round(seconds, 2),
        "artifacts": str(run_root) if run_root else None,
        "parameters": parameters,
        "steps": [{"name": s.name, "status": s.status, "seconds": s.seconds, "log": s.log or None} for s in steps],
        "dataset": stats and {k: stats[k] for k in ("source", "kind", "input_shape", "labels", "records", "examples",
                                                    "quarantined", "splits")}
        | {"image_size": stats.get("image_size"),
           "quarantine_file": str(_output(run_root, "prepare-data", "dataset", "quarantine.jsonl"))},
        "training": training and {k: training.get(k) for k in ("epochs", "num_workers", "strategy", "global_batch_size",
                                                               "attempts", "seconds", "hyperparameters")},
        "metrics": {
            "val_accuracy": training and training.get("val_accuracy"),
            "test_accuracy": evaluation and evaluation["accuracy"],
            "test_loss": evaluation and evaluation["loss"],
        },
        "gate": evaluation and {k: evaluation[k] for k in ("blessed", "reason", "threshold", "tolerance", "champion")},
        "tflite": tflite,
        "tuning": tuning(study_dir),
        "model": {
            "artifact": str(_output(run_root, trained_by, "model")) if training else None,
            "published_version": published.get("version"),
            "published_path": published.get("path"),
        },
        "registry": published and {"model_name": parameters.get("model_name"), "version": published["version"],
                                   "repository": parameters.get("model_repository"), "path": published["path"]},
        "endpoint": _endpoint(_json(_output(run_root, "deploy-model", "endpoint"))),
        "batch_prediction": _batch(run_root),
    }
    return summary


def plot_training_curves(history: list[dict], path: Path) -> Path | None:
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for key, ax in (("loss", ax_loss), ("accuracy", ax_acc)):
        for prefix, style in (("", "-o"), ("val_", "--s")):
            if prefix + key in history[0]:
                ax.plot(epochs, [h[prefix + key] for h in history], style, label=(prefix + key), markersize=3)
        ax.set_xlabel("epoch")
        ax.set_title(key)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_confusion_matrix(evaluation: dict | None, path: Path) -> Path | None:
    if not evaluation:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    matrix = np.array(evaluation["confusion_matrix"])
    labels = evaluation["labels"]
    fig, ax = plt.subplots(figsize=(1.5 + 0.5 * len(labels), 1.2 + 0.5 * len(labels)))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for (i, j), v in np.ndenumerate(matrix):
        ax.text(j, i, str(v), ha="center", va="center", color="white" if v > matrix.max() / 2 else "black",
                fontsize=8)
    ax.set_title(f"test accuracy {evaluation['accuracy']:.4f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


REPORT = jinja2.Template("""<!doctype html>
<html><head><meta charset="utf-8"><title>{{ s.pipeline }} run report</title>
<style>body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}.SUCCEEDED{color:#080}.FAILED{color:#b00}
.SKIPPED{color:#888}</style></head><body>
<h1>{{ s.pipeline }}: <span class="{{ s.status }}">{{ s.status }}</span></h1>
<p>{{ "%.1f"|format(s.seconds) }} s{% if s.error %} — error: {{ s.error }}{% endif %}</p>
<h2>Steps</h2><table><tr><th>step</th><th>status</th><th>seconds</th><th>log</th></tr>
{% for st in s.steps %}<tr><td>{{ st.name }}</td><td class="{{ st.status }}">{{ st.status }}</td>
<td>{{ st.seconds }}</td><td>{% if st.log %}<a href="{{ st.log }}">log</a>{% endif %}</td></tr>{% endfor %}</table>
{% if s.gate %}<h2>Evaluation gate</h2><p><b>{{ "blessed" if s.gate.blessed else "not blessed" }}</b>:
{{ s.gate.reason }}</p>{% endif %}
<h2>Metrics</h2><table>{% for k, v in s.metrics.items() %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>{% endfor %}
</table>
{% if s.dataset %}<h2>Dataset</h2><p>{{ s.dataset.source }} ({{ s.dataset.kind }}, input {{ s.dataset.input_shape }}):
{{ s.dataset.examples }} examples, {{ s.dataset.quarantined }} quarantined
(<a href="{{ s.dataset.quarantine_file }}">quarantine file</a>){% if s.dataset.image_size %}; image size
{{ s.dataset.image_size.reason }}{% endif %}</p>
<table><tr><th>class</th>{% for sp in s.dataset.splits %}<th>{{ sp }}</th>{% endfor %}</tr>
{% for c in s.dataset.labels %}<tr><td>{{ c }}</td>{% for sp in s.dataset.splits.values() %}
<td>{{ sp.per_class[c] }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% if s.training %}<h2>Training</h2><p>{{ s.training.strategy }}, {{ s.training.num_workers }} worker(s),
{{ s.training.epochs }} epochs, global batch {{ s.training.global_batch_size }}, {{ s.training.attempts }} attempt(s),
{{ s.training.seconds }} s</p>{% endif %}
{% for name, path in s.plots.items() %}<h3>{{ name }}</h3><img src="{{ path }}" alt="{{ name }}">{% endfor %}
{% if s.tuning and s.tuning.enabled %}<h2>Hyperparameter study</h2><p>{{ s.tuning.trials|length }} trials
({{ s.tuning.failed_trials }} failed) in {{ s.tuning.seconds }} s; best trial {{ s.tuning.best.trial_id }}:
{{ s.tuning.metric_id }} {{ "%.4f"|format(s.tuning.best.metric) }} with {{ s.tuning.best.parameters }}</p>
<table><tr><th>trial</th><th>parameters</th><th>{{ s.tuning.metric_id }}</th><th>status</th><th>seconds</th></tr>
{% for t in s.tuning.trials %}<tr><td>{{ t.trial_id }}</td><td>{{ t.parameters }}</td><td>{{ t.metric }}</td>
<td>{{ t.status }}</td><td>{{ t.seconds }}</td></tr>{% endfor %}</table>
<img src="{{ s.tuning.plot }}" alt="trials">{% endif %}
{% if s.tflite %}<h2>TFLite</h2><p><b>{{ "published" if s.tflite.published else "not published" }}</b>:
{{ s.tflite.reason }} (SavedModel test accuracy {{ "%.4f"|format(s.tflite.saved_model_accuracy) }})</p>
<table><tr><th>mode</th><th>bytes</th><th>vs float32</th><th>accuracy</th><th>drop (points)</th>
<th>latency mean / p95 (ms)</th><th>weight types</th></tr>
{% for m in s.tflite.modes %}<tr><td>{{ m.mode }}</td>{% if m.error %}<td colspan="6">{{ m.error }}</td>{% else %}
<td>{{ m.size_bytes }}</td><td>{{ m.size_ratio }}</td><td>{{ "%.4f"|format(m.accuracy) }}</td>
<td>{{ m.accuracy_drop_points }}</td><td>{{ "%.3f"|format(m.latency_ms_mean) }} / {{ "%.3f"|format(m.latency_ms_p95) }}</td>
<td>{{ m.weight_types }}</td>{% endif %}</tr>{% endfor %}</table>{% endif %}
{% if s.model.artifact %}<h2>Model</h2><p>artifact: {{ s.model.artifact }}</p>{% endif %}
{% if s.registry %}<h2>Registry</h2><p>{{ s.registry.model_name }} version {{ s.registry.version }} in
{{ s.registry.repository }}: {{ s.registry.path }}</p>{% endif %}
{% if s.endpoint %}<h2>Endpoint</h2><p>serving {{ s.endpoint.model_name }} version {{ s.endpoint.served_version }}:
REST <code>{{ s.endpoint.rest_url }}/v1/models/{{ s.endpoint.model_name }}:predict</code>{% if s.endpoint.grpc_target %},
gRPC <code>{{ s.endpoint.grpc_target }}</code>{% endif %}{% if s.endpoint.stop %}; stop with
<code>{{ s.endpoint.stop }}</code> (log: {{ s.endpoint.log }}){% endif %}</p>{% endif %}
{% if s.batch_prediction %}<h2>Batch prediction</h2><p>{{ s.batch_prediction.instances }} instances from
{{ s.batch_prediction.files|length }} file(s): {{ s.batch_prediction.succeeded }} predicted,
<b>{{ s.batch_prediction.failed }} failed</b> (see <code>prediction.errors_stats-*</code>) in
{{ s.batch_prediction.seconds }} s; output <code>{{ s.batch_prediction.output_directory }}</code></p>{% endif %}
<p><a href="run_summary.json">run_summary.json</a></p>
</body></html>
""")


def write(summary: dict, out_dir: Path) -> None:
    """Write the plots, `run_summary.json` and `report.html` into `out_dir`."""
    root = Path(summary["artifacts"]) if summary["artifacts"] else None
    history = _history(_output(root, "train-model", "training", "history.jsonl"))
    evaluation = _json(_output(root, "evaluate-model", "evaluation"))
    plots = {
        "training curves": plot_training_curves(history, out_dir / "training_curves.png"),
        "confusion matrix": plot_confusion_matrix(evaluation, out_dir / "confusion_matrix.png"),
    }
    summary["plots"] = {name: path.name for name, path in plots.items() if path}
    summary["report"] = str(out_dir / "report.html")
    (out_dir / "run_summary.json").write_text(json.dumps(summary, indent=2))
    (out_dir / "report.html").write_text(REPORT.render(s=summary))
