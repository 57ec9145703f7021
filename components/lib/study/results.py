"""The study's results files: trials.json (the study's record), trials.csv (a row a trial) and trials.png (the
metric per trial and the best so far)."""

import csv
import json
import os


def write_results(result: dict, out_dir: str) -> None:
    """trials.json, trials.csv and trials.png (metric per trial and best so far)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "trials.json"), "w") as f:
        json.dump(result, f, indent=2)
    names = [p["parameter_id"] for p in result["spec"]["parameters"]]
    with open(os.path.join(out_dir, "trials.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial_id", *names, result["spec"]["metric_id"], "status", "seconds"])
        for t in result["trials"]:
            writer.writerow(
                [t["trial_id"], *(t["parameters"].get(n) for n in names), t["metric"], t["status"], t["seconds"]]
            )
    plot_trials(result, os.path.join(out_dir, "trials.png"))


def plot_trials(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maximize = result["spec"]["goal"] == "maximize"
    xs, ys, best_so_far, current = [], [], [], None
    for t in result["trials"]:
        if t["metric"] is None:
            continue
        xs.append(int(t["trial_id"]))
        ys.append(t["metric"])
        current = t["metric"] if current is None else (max if maximize else min)(current, t["metric"])
        best_so_far.append(current)
    metric = result["spec"]["metric_id"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, ys, "o", label=metric)
    ax.step(xs, best_so_far, where="post", label="best so far")
    ax.set_title(f"Hyperparameter study: {metric} per trial ({result['spec']['goal']})")
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
