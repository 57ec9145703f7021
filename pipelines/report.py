"""Run output: `run_summary.json`, PNG plots (training curves, confusion matrix) and `report.html`."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2

from core.units import size, value


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
    return {
        "rest_url": deployed["rest_url"],
        "grpc_target": deployed.get("grpc_target") or None,
        "served_version": int(version) if version is not None else None,
        "model_name": deployed.get("model_name"),
        "started_by_this_run": bool(deployed.get("started")),
        "pid": deployed.get("pid"),
        "log": deployed.get("log"),
        "stop": deployed.get("stop") or None,
    }


def _batch(run_root: Path | None) -> dict | None:
    metadata = _artifact_metadata(run_root, "run-batch-prediction", "predictions")
    if not metadata:
        return None
    return {
        k: metadata.get(k)
        for k in (
            "output_directory",
            "model",
            "instances",
            "succeeded",
            "failed",
            "files",
            "seconds",
            "instances_per_second",
        )
    }


def tuning(study_dir: Path | None) -> dict | None:
    """The study's section from the folder its results were written to (trials.json, trials.png)."""
    if study_dir is None:
        return None
    study = _json(study_dir / "trials.json")
    return study and {
        "enabled": study.get("enabled", True),
        "trials": study["trials"],
        "failed_trials": study.get("failed_trials", 0),
        "best": study.get("best"),
        "seconds": study.get("seconds"),
        "metric_id": (study.get("spec") or {}).get("metric_id"),
        "plot": str(study_dir / "trials.png"),
    }


def _trained_by(run_root: Path | None) -> str:
    """The step whose `training` output holds the metrics and the history: train-model (self-hosted) or
    import-trained-model (vertex)."""
    return "import-trained-model" if run_root and (run_root / "import-trained-model").is_dir() else "train-model"


def collect(run_root: Path | None, steps, pipeline_name: str, parameters: dict, seconds: float) -> dict:
    """Assemble the run summary from the steps' statuses and their output artifacts."""
    failed = [s for s in steps if s.status == "FAILED"]
    stats = _json(_output(run_root, "prepare-data", "dataset", "stats.json"))
    trained_by = _trained_by(run_root)
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
        "steps": [
            {
                "name": s.name,
                "status": s.status,
                "seconds": s.seconds,
                "peak_memory_bytes": s.peak_memory_bytes,
                "log": s.log or None,
                "progress": s.progress,
            }
            for s in steps
        ],
        "dataset": stats
        and {
            k: stats[k]
            for k in ("source", "kind", "input_shape", "labels", "records", "examples", "quarantined", "splits")
        }
        | {
            "image_size": stats.get("image_size"),
            "quarantine_file": str(_output(run_root, "prepare-data", "dataset", "quarantine.jsonl")),
        },
        "training": training
        and {
            k: training.get(k)
            for k in (
                "epochs",
                "num_workers",
                "strategy",
                "devices",
                "worker_devices",
                "global_batch_size",
                "attempts",
                "seconds",
                "hyperparameters",
            )
        },
        "metrics": {
            "val_accuracy": training and training.get("val_accuracy"),
            "test_accuracy": evaluation and evaluation["accuracy"],
            "test_loss": evaluation and evaluation["loss"],
        },
        "drift": _json(_output(run_root, "check-champion", "drift")),
        "gate": evaluation and {k: evaluation[k] for k in ("blessed", "reason", "threshold", "tolerance", "champion")},
        "tflite": tflite,
        "tuning": tuning(study_dir),
        "model": {
            "artifact": str(_output(run_root, trained_by, "model")) if training else None,
            "published_version": published.get("version"),
            "published_path": published.get("path"),
        },
        "registry": published
        and {
            "model_name": parameters.get("model_name"),
            "version": published["version"],
            "repository": parameters.get("model_repository"),
            "path": published["path"],
        },
        "endpoint": _endpoint(_json(_output(run_root, "deploy-model", "endpoint"))),
        "batch_prediction": _batch(run_root),
    }
    return summary


def fraction(v: float | None) -> str:
    """Accuracies and losses to 4 decimals; a missing one as a dash."""
    return "–" if v is None else f"{v:.4f}"


def seconds(v: float | None) -> str:
    """Seconds to 0.1 s; a missing one as a dash."""
    return "–" if v is None else f"{v:.1f} s"


def milliseconds(v: float) -> str:
    """A latency given in ms: in µs below 1 ms."""
    return f"{v * 1000:.1f} µs" if round(v * 1000, 1) < 1000 else f"{v:.2f} ms"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def training_curves(history: list[dict]):
    """Loss and accuracy per epoch, training and validation (a figure, or None without history)."""
    if not history:
        return None
    plt = _pyplot()
    epochs = [h["epoch"] for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    units = {"loss": "loss (cross-entropy)", "accuracy": "accuracy (fraction correct)"}
    for key, ax in (("loss", ax_loss), ("accuracy", ax_acc)):
        for prefix, style, split in (("", "-o", "training"), ("val_", "--s", "validation")):
            if prefix + key in history[0]:
                ax.plot(epochs, [h[prefix + key] for h in history], style, label=split, markersize=3)
        ax.set_title(f"{key.capitalize()} per epoch")
        ax.set_xlabel("epoch")
        ax.set_ylabel(units[key])
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def confusion_matrix(evaluation: dict | None):
    """The test split's confusion matrix, counts in the cells (a figure, or None without an evaluation)."""
    if not evaluation:
        return None
    plt = _pyplot()
    import numpy as np

    matrix = np.array(evaluation["confusion_matrix"])
    labels = evaluation["labels"]
    fig, ax = plt.subplots(figsize=(max(5.0, 2.5 + 0.5 * len(labels)), 1.7 + 0.5 * len(labels)))
    image = ax.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=ax, label="test examples")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    for (i, j), v in np.ndenumerate(matrix):
        ax.text(j, i, str(v), ha="center", va="center", color="white" if v > matrix.max() / 2 else "black", fontsize=8)
    ax.set_title(f"Confusion matrix, test split (accuracy {evaluation['accuracy']:.4f})")
    fig.tight_layout()
    return fig


def _save(fig, path: Path) -> Path | None:
    if fig is None:
        return None
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def trials_as_finished(steps: list[dict]) -> list[dict]:
    """The study's trials in the order they finished, from its step's progress events: seconds into the step,
    trial, status, metric and the best so far."""
    return [
        {k: event.get(k) for k in ("seconds", "trial", "status", "metric", "best", "best_trial")}
        for step in steps
        for event in step.get("progress") or []
        if event.get("stage") == "study" and event.get("event") == "trial_finished"
    ]


def _trial_columns(trials: list[dict]) -> list[str]:
    """The study's parameter names, in the order the trials first name them."""
    return list(dict.fromkeys(name for t in trials for name in t["parameters"]))


ENV = jinja2.Environment(autoescape=False)
ENV.filters.update(
    value=value, fraction=fraction, seconds=seconds, size=size, milliseconds=milliseconds, percent=lambda v: f"{v:.0%}"
)
ENV.globals.update(trial_columns=_trial_columns, trials_as_finished=trials_as_finished)
REPORT = ENV.from_string("""<!doctype html>
<html><head><meta charset="utf-8"><title>{{ s.pipeline }} run report</title>
<style>body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}td.n{text-align:right}.SUCCEEDED{color:#080}
.FAILED{color:#b00}.SKIPPED{color:#888}tr.best{font-weight:bold}</style></head><body>
<h1>{{ s.pipeline }}: <span class="{{ s.status }}">{{ s.status }}</span></h1>
<p>{{ s.seconds|seconds }}{% if s.error %} — error: {{ s.error }}{% endif %}</p>
<h2>Steps</h2><table><tr><th>step</th><th>status</th><th>time</th><th>peak memory</th><th>log</th>
<th>last progress</th></tr>
{% for st in s.steps %}<tr><td>{{ st.name }}</td><td class="{{ st.status }}">{{ st.status }}</td>
<td class="n">{{ st.seconds|seconds }}</td>
<td class="n">{% if st.peak_memory_bytes %}{{ st.peak_memory_bytes|size }}{% endif %}</td><td>{% if st.log %}<a href="{{ st.log }}">log</a>{% endif %}</td>
<td>{% if st.progress %}{{ st.progress[-1].message }}{% endif %}</td></tr>
{% endfor %}</table>
{% if s.parameters %}<details><summary>Pipeline parameters</summary><table><tr><th>parameter</th><th>value</th></tr>
{% for k, v in s.parameters.items() %}<tr><td>{{ k }}</td><td>{{ v|value }}</td></tr>
{% endfor %}</table></details>{% endif %}
{% if s.drift %}<h2>Data drift</h2>{% if not s.drift.compared %}<p>{{ s.drift.reason }}</p>{% else %}
<p>Against the champion's training data, limits: class distance {{ s.drift.limits.drift_max_class_distance }},
Jensen-Shannon divergence {{ s.drift.limits.drift_max_js_divergence }} ({{ s.drift.limits.drift_action }} past them).
{% if s.drift.past %}<b>Past the limits:</b> {{ s.drift.past|join("; ") }}{% else %}Nothing past the limits.{% endif %}</p>
<table><tr><th>class</th><th>champion's share</th><th>this data's share</th></tr>
{% for c in (s.drift.classes.champion.keys()|list + s.drift.classes.data.keys()|list)|unique %}<tr><td>{{ c }}</td>
<td class="n">{{ s.drift.classes.champion.get(c, 0)|percent }}</td><td class="n">{{ s.drift.classes.data.get(c, 0)|percent }}</td></tr>
{% endfor %}<tr><th>L-infinity distance</th><th colspan="2">{{ "%.3f"|format(s.drift.classes.l_infinity) }} (class
{{ s.drift.classes.at }})</th></tr></table>
{% if s.drift.features %}<table><tr><th>feature</th><th>Jensen-Shannon divergence</th><th>champion's mean / variance</th>
<th>this data's mean / variance</th></tr>
{% for f in s.drift.features %}<tr><td>{{ f.name }}</td><td class="n">{{ "%.3f"|format(f.js_divergence) }}</td>
<td class="n">{{ "%.4g"|format(f.champion.mean) }} / {{ "%.4g"|format(f.champion.variance) }}</td>
<td class="n">{{ "%.4g"|format(f.data.mean) }} / {{ "%.4g"|format(f.data.variance) }}</td></tr>
{% endfor %}</table>{% endif %}
{% if s.drift.image_sizes %}<p>Image sizes (shorter side): {{ s.drift.image_sizes.champion|join("–") }} px in the
champion's training data, {{ s.drift.image_sizes.data|join("–") }} px here; Jensen-Shannon divergence
{{ "%.3f"|format(s.drift.image_sizes.js_divergence) }}</p>{% endif %}{% endif %}
{% if s.drift.missing %}<p>Classes missing from this data: {{ s.drift.missing|join(", ") }}</p>{% endif %}
{% if s.drift.new %}<p>New classes in this data: {{ s.drift.new|join(", ") }}</p>{% endif %}{% endif %}
{% if s.gate %}<h2>Evaluation gate</h2><p><b>{{ "blessed" if s.gate.blessed else "not blessed" }}</b>:
{{ s.gate.reason }}</p>{% endif %}
<h2>Metrics</h2><table><tr><th>metric</th><th>value</th></tr>
<tr><td>validation accuracy</td><td class="n">{{ s.metrics.val_accuracy|fraction }}</td></tr>
<tr><td>test accuracy</td><td class="n">{{ s.metrics.test_accuracy|fraction }}</td></tr>
<tr><td>test loss (cross-entropy)</td><td class="n">{{ s.metrics.test_loss|fraction }}</td></tr>
</table>
{% if s.dataset %}<h2>Dataset</h2><p>{{ s.dataset.source }} ({{ s.dataset.kind }}, input
{{ s.dataset.input_shape|join(" × ") }}): {{ s.dataset.examples }} examples, {{ s.dataset.quarantined }} quarantined
(<a href="{{ s.dataset.quarantine_file }}">quarantine file</a>){% if s.dataset.image_size %}; image size
{{ s.dataset.image_size.reason }}{% endif %}</p>
<table><tr><th>class</th>{% for sp in s.dataset.splits %}<th>{{ sp }}</th>{% endfor %}</tr>
{% for c in s.dataset.labels %}<tr><td>{{ c }}</td>{% for sp in s.dataset.splits.values() %}
<td class="n">{{ sp.per_class[c] }}</td>{% endfor %}</tr>
{% endfor %}<tr><th>examples</th>{% for sp in s.dataset.splits.values() %}<th>{{ sp.examples }}</th>{% endfor %}</tr>
<tr><th>size</th>{% for sp in s.dataset.splits.values() %}<th>{{ sp.bytes|size }}</th>{% endfor %}</tr></table>
{% endif %}
{% if s.training %}<h2>Training</h2><p>{{ s.training.strategy }}, {{ s.training.num_workers }} worker(s),
{{ s.training.epochs }} epochs, global batch {{ s.training.global_batch_size }}, {{ s.training.attempts }} attempt(s),
{{ s.training.seconds|seconds }}{% if s.training.worker_devices %}; devices:
{% for name, what in s.training.worker_devices.items() %}{{ name }} {{ what }}{{ ", " if not loop.last }}{% endfor %}{% endif %}</p>
{% if s.training.hyperparameters %}<table><tr><th>hyperparameter</th><th>value</th></tr>
{% for k, v in s.training.hyperparameters.items() %}<tr><td>{{ k }}</td><td class="n">{{ v|value }}</td></tr>
{% endfor %}</table>{% endif %}{% endif %}
{% for name, path in s.plots.items() %}<h3>{{ name|capitalize }}</h3><img src="{{ path }}" alt="{{ name }}">
{% endfor %}
{% if s.tuning and s.tuning.enabled %}{% set columns = trial_columns(s.tuning.trials) %}
<h2>Hyperparameter study</h2><p>{{ s.tuning.trials|length }} trials ({{ s.tuning.failed_trials }} failed) in
{{ s.tuning.seconds|seconds }}{% if s.tuning.best %}; best: trial {{ s.tuning.best.trial_id }},
{{ s.tuning.metric_id }} {{ s.tuning.best.metric|fraction }} (in bold){% endif %}</p>
<table><tr><th>trial</th>{% for c in columns %}<th>{{ c }}</th>{% endfor %}<th>{{ s.tuning.metric_id }}</th>
<th>status</th><th>time</th></tr>
{% for t in s.tuning.trials %}
<tr{% if s.tuning.best and t.trial_id == s.tuning.best.trial_id %} class="best"{% endif %}>
<td>{{ t.trial_id }}</td>{% for c in columns %}<td class="n">{{ t.parameters.get(c, "–")|value }}</td>{% endfor %}
<td class="n">{{ t.metric|fraction }}</td><td class="{{ t.status }}"{% if t.error %} title="{{ t.error }}"{% endif %}>
{{- t.status }}</td><td class="n">{{ t.seconds|seconds }}</td></tr>
{% endfor %}</table>
<img src="{{ s.tuning.plot }}" alt="study trials">
{% set finished = trials_as_finished(s.steps) %}{% if finished %}<h3>Trials as they finished</h3>
<table><tr><th>time</th><th>trial</th><th>{{ s.tuning.metric_id }}</th><th>best so far</th></tr>
{% for t in finished %}<tr><td class="n">{{ t.seconds|seconds }}</td><td>{{ t.trial }}</td>
<td class="n">{% if t.status == "SUCCEEDED" %}{{ t.metric|fraction }}{% else %}{{ t.status }}{% endif %}</td>
<td class="n">{{ t.best|fraction }}{% if t.best_trial %} (trial {{ t.best_trial }}){% endif %}</td></tr>
{% endfor %}</table>{% endif %}{% endif %}
{% macro tflite_row(name, m) %}<tr><td>{{ name }}</td>{% if m.error %}<td colspan="6">{{ m.error }}</td>{% else %}
<td class="n">{{ m.size_bytes|size }}</td><td class="n">{{ m.size_ratio|percent }}</td>
<td class="n">{{ m.accuracy|fraction }}</td><td class="n">{{ "%.2f"|format(m.accuracy_drop_points) }}</td>
<td class="n">{{ m.latency_ms_mean|milliseconds }} / {{ m.latency_ms_p95|milliseconds }}</td>
<td>{% for t, n in m.weight_types.items() %}{{ t }}: {{ n }}{{ ", " if not loop.last }}{% endfor %}</td>{% endif %}</tr>
{% endmacro %}
{% if s.tflite %}<h2>TFLite</h2><p><b>{{ "published" if s.tflite.published else "not published" }}
{%- if s.tflite.published_from %} ({{ s.tflite.published_from }}){% endif %}</b>:
{{ s.tflite.reason }} (SavedModel test accuracy {{ s.tflite.saved_model_accuracy|fraction }})</p>
<table><tr><th>mode</th><th>size</th><th>size vs float32</th><th>test accuracy</th><th>drop (points)</th>
<th>latency mean / p95</th><th>weight tensors by type</th></tr>
{% for m in s.tflite.modes %}{{ tflite_row(m.mode ~ (", post-training" if s.tflite.qat and m.mode == "int8" else ""), m) }}
{%- endfor %}
{% if s.tflite.qat %}{{ tflite_row(s.tflite.qat.name, s.tflite.qat) }}
{%- endif %}</table>
{% if s.tflite.qat and s.tflite.qat.quantized_layers %}<p>Quantization-aware training quantized
{{ s.tflite.qat.quantized_layers|join(", ") }}; left float for the converter:
{{ s.tflite.qat.float_layers|join(", ") or "none" }}.</p>{% endif %}{% endif %}
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
{{ s.batch_prediction.seconds|seconds }}{% if s.batch_prediction.instances_per_second %}
({{ "%.0f"|format(s.batch_prediction.instances_per_second) }} instances/s){% endif %}; output
<code>{{ s.batch_prediction.output_directory }}</code></p>{% endif %}
<p><a href="run_summary.json">run_summary.json</a></p>
</body></html>
""")


def write(summary: dict, out_dir: Path) -> None:
    """Write the plots, `run_summary.json` and `report.html` into `out_dir`."""
    root = Path(summary["artifacts"]) if summary["artifacts"] else None
    history = _history(_output(root, _trained_by(root), "training", "history.jsonl"))
    evaluation = _json(_output(root, "evaluate-model", "evaluation"))
    plots = {
        "training curves": _save(training_curves(history), out_dir / "training_curves.png"),
        "confusion matrix": _save(confusion_matrix(evaluation), out_dir / "confusion_matrix.png"),
    }
    summary["plots"] = {name: path.name for name, path in plots.items() if path}
    summary["report"] = str(out_dir / "report.html")
    (out_dir / "run_summary.json").write_text(json.dumps(summary, indent=2))
    (out_dir / "report.html").write_text(REPORT.render(s=summary))
