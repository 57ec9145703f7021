"""GPUs on one machine (no GPU here: device lists faked): the GPUs found without TensorFlow, the environment every
local worker and every parallel trial receives with 0, 1 and 4 GPUs, and the strategy each then builds."""

import io
import sys

import pytest

from components.lib.study.runner_pool import RunnerPool
from components.train_model import launch
from core.gpus import gpu_ids
from trainer.distribute import strategy_for

SMI = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2)\n"
NAMES = ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH")
MACHINES = {0: [], 1: ["0"], 4: ["0", "1", "2", "3"]}

# (GPUs, processes) -> per process: (CUDA_VISIBLE_DEVICES, TF_FORCE_GPU_ALLOW_GROWTH, strategy of a local worker)
EXPECTED = {
    (0, 1): [(None, None, "default")],
    (0, 2): [(None, None, "MultiWorkerMirroredStrategy")] * 2,
    (1, 1): [("0", None, "default")],
    (1, 2): [("0", "true", "MultiWorkerMirroredStrategy")] * 2,
    (4, 1): [("0,1,2,3", None, "MirroredStrategy")],
    (4, 2): [("0,1", None, "MultiWorkerMirroredStrategy"), ("2,3", None, "MultiWorkerMirroredStrategy")],
    (4, 4): [(str(i), None, "MultiWorkerMirroredStrategy") for i in range(4)],
    (1, 4): [("0", "true", "MultiWorkerMirroredStrategy")] * 4,
}


def test_gpus_are_found_from_the_users_choice_then_nvidia_smi_then_the_driver():
    assert gpu_ids("2, 3", SMI, ["a", "b", "c"]) == ["2", "3"]
    assert gpu_ids("", SMI, ["a"]) == [] and gpu_ids("-1", SMI, []) == [] and gpu_ids("1,-1,0", None, []) == ["1"]
    assert gpu_ids(None, SMI, ["a", "b", "c"]) == ["0", "1"]
    assert gpu_ids(None, "No devices were found\n", ["a"]) == []
    assert gpu_ids(None, None, ["0000:3b:00.0", "0000:af:00.0"]) == ["0", "1"]
    assert gpu_ids(None, None, []) == []


def _environ(pid: int) -> dict:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = (item.decode().partition("=") for item in f.read().split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def _gpus_seen(env: dict) -> list[str]:
    """The device list TensorFlow would give a process with this environment on the faked machine."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return [f"/physical_device:GPU:{i}" for i, _ in enumerate(visible.split(","))] if visible else []


class Seen(Exception):
    """Raised by on_start once the workers' environments are read: the launcher stops them."""


@pytest.mark.parametrize("gpus,workers", sorted(EXPECTED))
def test_every_local_worker_gets_its_gpus_and_builds_its_strategy(tmp_path, gpus, workers):
    seen: list[dict] = []

    def read_environments(attempt, pids):
        seen.extend(_environ(pid) for pid in pids)
        raise Seen

    sink = io.StringIO()
    with pytest.raises(Seen):
        launch(
            workers,
            ["--data-dir", str(tmp_path / "data"), "--job-dir", str(tmp_path / "job")],
            str(tmp_path / "logs"),
            sink=sink,
            on_start=read_environments,
            gpus=MACHINES[gpus],
        )
    got = [(*(env.get(name) for name in NAMES), strategy_for(workers, _gpus_seen(env))) for env in seen]
    assert got == EXPECTED[gpus, workers]
    described = {
        None: "CPU",
        **{(v, g): f"GPU {v}" + (" (shared, memory growth)" if g else "") for v, g, _ in EXPECTED[gpus, workers] if v},
    }
    names = ["chief", *(f"worker-{i}" for i in range(workers - 1))]
    words = [described[(v, g) if v else None] for v, g, _ in EXPECTED[gpus, workers]]
    assert sink.getvalue().splitlines()[0] == "[launcher] devices: " + ", ".join(
        f"{n} {w}" for n, w in zip(names, words)
    )


TRIAL = """
import os, sys
print(*(os.environ.get(name) for name in sys.argv[1:]), flush=True)
sys.exit(3 if os.environ["CLOUD_ML_TRIAL_ID"] == "fail" else 0)
"""


@pytest.mark.parametrize("gpus,parallel", sorted(EXPECTED))
def test_every_parallel_trial_gets_its_gpus_and_builds_its_strategy(tmp_path, monkeypatch, gpus, parallel):
    """Each runner slot keeps its devices: a trial runs in the slot it is given, a failed runner's replacement takes
    over its slot. Trials are single-process: MirroredStrategy over a slot's GPUs when it has several."""
    (tmp_path / "fake_trial.py").write_text(TRIAL)
    env = {"PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}"}
    pool = RunnerPool(parallel, "fake_trial", env, str(tmp_path / "runners"), gpus=MACHINES[gpus])
    lines = []
    try:
        for trial in range(parallel):  # one after another: each takes the next idle runner, slot 0 first
            log = tmp_path / f"{trial}.log"
            assert pool.run(list(NAMES), {"CLOUD_ML_TRIAL_ID": str(trial)}, str(log)) == 0
            lines.append(log.read_text().split())
        assert pool.run(list(NAMES), {"CLOUD_ML_TRIAL_ID": "fail"}, str(tmp_path / "fail.log")) == 3  # in slot 0
        for _ in range(parallel):  # slots 1.., then slot 0's fresh runner
            assert pool.run(list(NAMES), {"CLOUD_ML_TRIAL_ID": "again"}, str(tmp_path / "again.log")) == 0
    finally:
        pool.close()
    got = [
        (*(None if v == "None" else v for v in line), strategy_for(1, _gpus_seen({"CUDA_VISIBLE_DEVICES": line[0]})))
        for line in lines
    ]
    expected = [(v, g, "MirroredStrategy" if v and "," in v else "default") for v, g, _ in EXPECTED[gpus, parallel]]
    assert got == expected
    assert pool.started == parallel + 1
    assert (
        (tmp_path / "fail.log").read_text() == (tmp_path / "again.log").read_text() == (tmp_path / "0.log").read_text()
    )
