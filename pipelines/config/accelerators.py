"""The accelerators a Vertex AI machine takes: the names of aiplatform's AcceleratorType, and the machine series each
GPU attaches to (Compute Engine's GPU machine types), as the config checks them on load and the Vertex double checks
a request's MachineSpec."""

from __future__ import annotations

# accelerator -> the machine series it attaches to
ACCELERATOR_MACHINES = {
    "NVIDIA_TESLA_T4": ("n1-",),
    "NVIDIA_TESLA_V100": ("n1-",),
    "NVIDIA_TESLA_P100": ("n1-",),
    "NVIDIA_TESLA_P4": ("n1-",),
    "NVIDIA_TESLA_A100": ("a2-highgpu-", "a2-megagpu-"),
    "NVIDIA_A100_80GB": ("a2-ultragpu-",),
    "NVIDIA_L4": ("g2-",),
    "NVIDIA_H100_80GB": ("a3-highgpu-",),
    "NVIDIA_H100_MEGA_80GB": ("a3-megagpu-",),
    "NVIDIA_H200_141GB": ("a3-ultragpu-",),
    "NVIDIA_B200": ("a4-highgpu-",),
    "NVIDIA_GB200": ("a4x-highgpu-",),
}


def accelerator_types() -> list[str]:
    """The accelerator names of aiplatform_v1's AcceleratorType (without ACCELERATOR_TYPE_UNSPECIFIED)."""
    from google.cloud.aiplatform_v1.types import AcceleratorType

    return [name for name in AcceleratorType.__members__ if name != "ACCELERATOR_TYPE_UNSPECIFIED"]


def accelerator_problem(field: str, accelerator: str, count: int, machine_type: str) -> str | None:
    """Why `count` accelerators `accelerator` on `machine_type` cannot be (`field`: the setting's name prefix, as in
    `{field}_accelerator_type`), or None: type and count go together, the type is an AcceleratorType, and a GPU
    whose machine series is known attaches to that series."""
    if bool(accelerator) != bool(count):
        return f"{field}accelerator_type and {field}accelerator_count must be set together"
    if not accelerator:
        return None
    types = accelerator_types()
    if accelerator not in types:
        return f"{field}accelerator_type {accelerator!r} is not an AcceleratorType of Vertex AI ({', '.join(types)})"
    series = ACCELERATOR_MACHINES.get(accelerator)
    if series and not machine_type.startswith(series):
        return (
            f"{field}accelerator_type {accelerator} attaches to {' or '.join(s + '*' for s in series)} machines, "
            f"not {field}machine_type {machine_type!r}"
        )
    return None
