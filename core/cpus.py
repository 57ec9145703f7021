"""How many CPUs this process may use: what data prep, batch prediction and the model server size their pools by."""

import math
import os


def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask, bounded by a cgroup CPU limit (a Kubernetes pod's or a
    container's: cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`), at least 1."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota, period = ((_read("/sys/fs/cgroup/cpu.max") or "max").split() + ["100000"])[:2]
    if quota == "max":
        quota = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").strip() or "-1"
        period = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us").strip() or "100000"
    if quota.isdigit() and period.isdigit() and int(period) > 0:
        cpus = min(cpus, math.ceil(int(quota) / int(period)))
    return max(1, cpus)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, ValueError):
        return ""
