"""The GPUs of this machine, found without TensorFlow, and how the TensorFlow processes one launcher starts on it
share them: the local launcher's workers and the study's parallel trials."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

PROC_GPUS = "/proc/driver/nvidia/gpus"  # one folder per GPU the NVIDIA driver found
VISIBLE = "CUDA_VISIBLE_DEVICES"
GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"  # TensorFlow allocates GPU memory as it needs it, not all at once


def gpu_ids(visible: str | None, nvidia_smi: str | None, driver_gpus: list[str]) -> list[str]:
    """The ids of the GPUs a process may use, as `CUDA_VISIBLE_DEVICES` names them: those a set
    `CUDA_VISIBLE_DEVICES` lists (the user's choice; "" or -1: none), else one per `GPU N:` line of `nvidia-smi -L`'s
    output (None: no nvidia-smi), else one per entry of the driver's GPU folder."""
    if visible is not None:
        ids = [part.strip() for part in visible.split(",") if part.strip()]
        return ids[: ids.index("-1")] if "-1" in ids else ids  # CUDA ignores the ids from an invalid one on
    if nvidia_smi is not None:
        return [str(i) for i, _ in enumerate(line for line in nvidia_smi.splitlines() if line.startswith("GPU "))]
    return [str(i) for i in range(len(driver_gpus))]


def machine_gpus(environ: Mapping[str, str] = os.environ) -> list[str]:
    """`gpu_ids` of this machine: `environ`'s `CUDA_VISIBLE_DEVICES`, `nvidia-smi -L`, `/proc/driver/nvidia/gpus`."""
    return gpu_ids(environ.get(VISIBLE), _nvidia_smi(), _entries(PROC_GPUS))


def _nvidia_smi() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _entries(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def gpu_env(gpus: list[str], index: int, processes: int) -> dict[str, str]:
    """The variables of process `index` of `processes` started together on a machine with `gpus`: with at least one
    GPU each, its own (`len(gpus) // processes` of them, consecutive); with fewer, GPU `index mod len(gpus)` shared
    with memory growth, so that no process takes all of its memory; no GPU: none."""
    if not gpus:
        return {}
    share = len(gpus) // processes
    if share:
        return {VISIBLE: ",".join(gpus[index * share : (index + 1) * share])}
    return {VISIBLE: gpus[index % len(gpus)], GROWTH: "true"}


def describe(env: Mapping[str, str]) -> str:
    """What `gpu_env` gave a process, in words: `GPU 0,1`, `GPU 0 (shared, memory growth)` or `CPU`."""
    if VISIBLE not in env:
        return "CPU"
    return f"GPU {env[VISIBLE]}" + (" (shared, memory growth)" if env.get(GROWTH) == "true" else "")
