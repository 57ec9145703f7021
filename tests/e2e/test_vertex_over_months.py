"""Months of scheduled runs on Vertex AI, rehearsed (`python -m pipelines rehearse` on one --state): a first run, a
canary at 10 %, weekly runs on unchanged data, fresh data, a failed deploy and the run after it, `promote`,
`rollback`, and two runs at once (the schedule's and Cloud Build's on a merge). After each: the endpoint's deployed
models and traffic split, the registry's versions and aliases, the jobs launched and the cache hits, and that no two
jobs wrote one output folder. One epoch on a tiny image folder: what is checked is what each run leaves behind."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.data import write_images
from tests.helpers.processes import run_cli
from tests.helpers.rehearsal import recorded

SETS = [
    "--set",
    "platform.keep_previous=1",
    "--set",
    "platform.data_prep={runner: direct}",
]
PARAMS = {"tune": "false", "epochs": "1", "accuracy_threshold": "0", "champion_tolerance": "1.0"}


class Months:
    """The runs of one project on one rehearsal state; every custom job's output folder seen so far."""

    def __init__(self, root: Path):
        self.root, self.state = root, root / "state"
        self.folders: list[str] = []

    def data(self, seed: int) -> Path:
        """A fresh export of the data set (another seed: other images, another fingerprint)."""
        return write_images(self.root / f"data-{seed}", per_class=10, size=(12, 12), seed=seed)

    def run(self, name: str, data: Path, *sets: str, fails: str = "", **params: str) -> dict:
        """The rehearsal `name` on `data`; `fails`: the line its failure must print (else it must succeed)."""
        values = {**PARAMS, "data_source": str(data), **params}
        args = [arg for k, v in values.items() for arg in ("--param", f"{k}={v}")]
        result = run_cli("rehearse", "--out", self.root / name, "--state", self.state, *SETS, *sets, *args)
        if fails:
            assert result.returncode != 0 and fails in result.stderr.splitlines()[-1], (name, result.stderr[-3000:])
            assert "Traceback" not in result.stderr, result.stderr  # one line, no stack
        else:
            assert result.returncode == 0, (name, result.stdout[-3000:] + result.stderr[-3000:])
        summary = json.loads((self.root / name / "run_summary.json").read_text())
        for job in recorded(self.root / name, "JobService.CreateCustomJob"):
            folder = job["custom_job"]["job_spec"]["base_output_directory"]["output_uri_prefix"]
            assert folder not in self.folders, (name, folder)  # no job writes another job's folder
            self.folders.append(folder)
        return summary

    def command(self, *args: str) -> None:
        result = run_cli(*args, "--rehearsal", self.state, *SETS)
        assert result.returncode == 0, result.stdout + result.stderr

    def saved(self) -> tuple[dict, list]:
        """({version id: its traffic share} of the endpoint's deployed models, [(version id, aliases)] of the
        registry), as the rehearsal's state holds them."""
        state = json.loads((self.state / "vertex_state.json").read_text())
        [endpoint] = state["endpoints"].values()
        split = endpoint["traffic_split"]
        deployed = {d["model_version_id"]: split.get(d["id"], 0) for d in endpoint["deployed_models"]}
        [model] = state["models"].values()
        return deployed, [(v["version_id"], sorted(v["version_aliases"])) for v in model["versions"]]


def statuses(summary: dict) -> dict:
    return {s["name"]: s["status"] for s in summary["steps"]}


@pytest.mark.timeout(1800)  # twelve rehearsals in a row, two of them at once
def test_months_of_scheduled_runs(tmp_path):
    months = Months(tmp_path)
    first_data = months.data(seed=1)
    # week 0: the first run creates the model and the endpoint, and serves all the traffic
    summary = months.run("week0", first_data)
    assert statuses(summary)["create-model"] == statuses(summary)["ensure-endpoint"] == "SUCCEEDED"
    assert months.saved() == ({"1": 100}, [("1", ["champion", "default"])])
    assert len(months.folders) == 1

    # week 1: fresh data, a canary at 10 %: version 2 takes its 10 % from the champion
    canary_data = months.data(seed=2)
    months.run("week1", canary_data, traffic_percentage="10")
    assert months.saved() == ({"1": 90, "2": 10}, [("1", ["champion", "default"]), ("2", [])])
    assert len(months.folders) == 2

    # weeks 2-4: unchanged data, the same schedule: everything served from the cache, nothing uploaded or deployed
    for week in ("week2", "week3", "week4"):
        summary = months.run(week, canary_data, traffic_percentage="10")
        steps = statuses(summary)
        for step in ("prepare-data", "custom-training-job", "import-trained-model", "evaluate-model"):
            assert steps[step] == "CACHED", (week, step)
        assert steps["model-upload"] == steps["deploy-vertex-model"] == "SKIPPED", week
        assert not recorded(tmp_path / week, "POST models:upload") and not recorded(
            tmp_path / week, "JobService.CreateCustomJob"
        )
        assert months.saved() == ({"1": 90, "2": 10}, [("1", ["champion", "default"]), ("2", [])]), week
    assert len(months.folders) == 2

    # week 5: fresh data again: version 3 replaces the canary (version 2 undeployed), the champion keeps 90 %
    months.run("week5", months.data(seed=3), traffic_percentage="10")
    assert months.saved() == ({"1": 90, "3": 10}, [("1", ["champion", "default"]), ("2", []), ("3", [])])

    # week 6: fresh data, and a config whose serving GPU does not attach to its machine type: Vertex refuses the
    # deploy. Version 4 is uploaded; the endpoint and the aliases stay as they were
    fresh = months.data(seed=4)
    gpu = [
        "--set",
        "platform.serving_accelerator_type=NVIDIA_TESLA_T4",
        "--set",
        "platform.serving_accelerator_count=1",
    ]
    gpu += [
        "--set",
        "platform.serving_machine_type=e2-standard-4",
        "--set",
        "platform.serving_gpu_image=r/serving-gpu:1",
    ]
    months.run("week6", fresh, *gpu, fails="NVIDIA_TESLA_T4 attaches to n1-* machines", traffic_percentage="10")
    registry = [("1", ["champion", "default"]), ("2", []), ("3", []), ("4", [])]
    assert months.saved() == ({"1": 90, "3": 10}, registry)

    # week 7: the config fixed, the same data: the training is served from the cache and the version the failed run
    # uploaded is deployed (no second upload); it replaces the canary of week 5
    summary = months.run("week7", fresh, traffic_percentage="10")
    steps = statuses(summary)
    assert (
        steps["custom-training-job"] == "CACHED" and steps["importer-2"] == steps["deploy-vertex-model"] == "SUCCEEDED"
    )
    assert not recorded(tmp_path / "week7", "POST models:upload")
    assert months.saved() == ({"1": 90, "4": 10}, registry)

    # promote: the canary serves everything and becomes the champion; keep_previous=1 keeps version 1 at 0 %
    months.command("promote")
    assert months.saved() == ({"1": 0, "4": 100}, [("1", []), ("2", []), ("3", []), ("4", ["champion", "default"])])

    # rollback: version 1 serves again and holds the aliases again; version 4 is undeployed
    months.command("rollback")
    assert months.saved() == ({"1": 100}, registry)
    assert len(set(months.folders)) == len(months.folders) == 4

    # two runs at once on fresh data (the weekly schedule and Cloud Build's run on a merge): each trains in a folder of
    # its own and both succeed; the endpoint ends with the champion at 90 % and one canary at 10 %, a version one of
    # them uploaded; the champion keeps its aliases
    fresh = months.data(seed=5)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda name: months.run(name, fresh, traffic_percentage="10"), ("merge", "week8")))
    launched = [len(recorded(tmp_path / name, "JobService.CreateCustomJob")) for name in ("merge", "week8")]
    uploaded = sum(len(recorded(tmp_path / name, "POST models:upload")) for name in ("merge", "week8"))
    assert sum(launched) >= 1 and max(launched) == 1 and uploaded == sum(launched), (launched, uploaded)
    deployed, versions = months.saved()
    new = [str(v) for v in range(5, 5 + uploaded)]
    assert versions == [*registry, *((v, []) for v in new)]
    [canary] = set(deployed) - {"1"}
    assert deployed == {"1": 90, canary: 10} and canary in new, deployed
    assert all(statuses(r)["finish-vertex-rollout"] in ("SUCCEEDED", "SKIPPED") for r in runs)
    assert len(set(months.folders)) == len(months.folders) == 4 + sum(launched)
