"""How many CPUs this process may use: what data prep, batch prediction and the model server size their pools by."""

import math
import os


def available_cpus() -> int:
    """The CPUs this process may use, at least 1: its affinity mask, bounded by the cgroup CPU limit when one is set
    (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), else, inside a Kubernetes pod, by the container's CPU request, rounded up.

    A container reads its request only back from its cgroup's CPU weight, which Kubernetes sets from it (KEP-2254):
    v1 `cpu.shares` = millicores * 1024 / 1000, v2 `cpu.weight` = 1 + (shares - 2) * 9999 / 262142. The weight is
    trusted only where `KUBERNETES_SERVICE_HOST` is set: elsewhere it is the default (100, or 1024 shares), not a
    request. The lowest weight (1, or 2 shares) means no request. runc 1.3.2+ and crun 1.23+ map shares to weight on a
    steeper curve (1024 shares: 100): under them a request reads higher (1 CPU as 3, 2 as 5, 8 as 14)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    bound = _limit() or (_request() if os.environ.get("KUBERNETES_SERVICE_HOST") else None)
    return max(1, min(cpus, bound) if bound else cpus)


def _limit() -> int | None:
    """The cgroup CPU limit in whole CPUs, rounded up; None without one."""
    quota, period = ((_read("/sys/fs/cgroup/cpu.max") or "max").split() + ["100000"])[:2]
    if quota == "max":
        quota = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").strip() or "-1"
        period = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us").strip() or "100000"
    if quota.isdigit() and period.isdigit() and int(period) > 0:
        return math.ceil(int(quota) / int(period))
    return None


def _request() -> int | None:
    """The CPU request in whole CPUs, rounded up, from the cgroup's CPU weight; None without a weight or a request."""
    weight = _read("/sys/fs/cgroup/cpu.weight").strip()
    shares = _read("/sys/fs/cgroup/cpu/cpu.shares").strip()
    if weight.isdigit():
        estimate = 2 + (int(weight) - 1) * 262142 / 9999
    elif shares.isdigit():
        estimate = int(shares)
    else:
        return None
    return math.ceil(estimate / 1024) if estimate > 2 else None


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, ValueError):
        return ""
