"""core.cpus.available_cpus against fake cgroup files on a machine whose affinity mask holds 8 CPUs."""

import pytest

from core import cpus
from core.cpus import available_cpus

V2_WEIGHT = "/sys/fs/cgroup/cpu.weight"
V1_SHARES = "/sys/fs/cgroup/cpu/cpu.shares"


def weight(millicores: int) -> str:
    """The cgroup v2 CPU weight Kubernetes sets for a CPU request (KEP-2254)."""
    return f"{1 + ((max(2, millicores * 1024 // 1000) - 2) * 9999) // 262142}\n"


@pytest.fixture
def cgroup(monkeypatch):
    """Sets the fake cgroup files, and whether the process runs in a Kubernetes pod."""
    monkeypatch.setattr(cpus.os, "sched_getaffinity", lambda pid: set(range(8)))

    def set_files(files: dict[str, str], in_pod: bool = True) -> None:
        monkeypatch.setattr(cpus, "_read", lambda path: files.get(path, ""))
        if in_pod:
            monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        else:
            monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    return set_files


@pytest.mark.parametrize(
    "files, expected",
    [
        ({}, 8),
        ({"/sys/fs/cgroup/cpu.max": "max 100000\n"}, 8),
        ({"/sys/fs/cgroup/cpu.max": "50000 100000\n"}, 1),
        ({"/sys/fs/cgroup/cpu.max": "150000 100000\n"}, 2),
        ({"/sys/fs/cgroup/cpu.max": "1600000 100000\n"}, 8),
        ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 1),
        ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n"}, 8),
    ],
)
def test_the_cgroup_limit_bounds_the_affinity_mask(cgroup, files, expected):
    cgroup(files)
    assert available_cpus() == expected


@pytest.mark.parametrize(
    "millicores, expected",
    [(100, 1), (500, 1), (1000, 1), (1001, 2), (1500, 2), (2000, 2), (3000, 3), (4000, 4), (6500, 7)],
)
def test_without_a_limit_a_pods_cpu_request_rounded_up_bounds_it(cgroup, millicores, expected):
    cgroup({V2_WEIGHT: weight(millicores)})
    assert available_cpus() == expected
    cgroup({V1_SHARES: f"{millicores * 1024 // 1000}\n"})
    assert available_cpus() == expected


def test_the_limit_when_set_else_the_request_never_more_than_the_affinity_mask(cgroup):
    cgroup({"/sys/fs/cgroup/cpu.max": "400000 100000\n", V2_WEIGHT: weight(1000)})
    assert available_cpus() == 4
    cgroup({"/sys/fs/cgroup/cpu.max": "max 100000\n", V2_WEIGHT: weight(1000)})
    assert available_cpus() == 1
    cgroup({V2_WEIGHT: weight(64000)})
    assert available_cpus() == 8


@pytest.mark.parametrize("shares_file, no_request, smallest_request", [(V2_WEIGHT, "1", "2"), (V1_SHARES, "2", "3")])
def test_the_lowest_weight_is_no_request(cgroup, shares_file, no_request, smallest_request):
    cgroup({shares_file: no_request})
    assert available_cpus() == 8
    cgroup({shares_file: smallest_request})
    assert available_cpus() == 1


@pytest.mark.parametrize("shares_file, default", [(V2_WEIGHT, "100"), (V1_SHARES, "1024")])
def test_the_weight_counts_only_inside_a_kubernetes_pod(cgroup, shares_file, default):
    cgroup({shares_file: default}, in_pod=False)
    assert available_cpus() == 8
    cgroup({shares_file: default}, in_pod=True)
    assert available_cpus() == {"100": 3, "1024": 1}[default]
