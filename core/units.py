"""Quantities as people read them, shared by the steps' messages and the run report."""


def size(n: float) -> str:
    """Bytes as B, KB, MB or GB (powers of 1000, one decimal)."""
    for unit in ("B", "KB", "MB"):
        if round(n, 1) < 1000:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def value(v) -> str:
    """A parameter's value as people read it: floats to 3 significant digits (0.010093959 → 0.0101, 1.0 → 1.0),
    lists comma-separated, dicts as `name=value` pairs."""
    if isinstance(v, float):
        text = f"{v:.3g}"
        return text if any(c in text for c in ".en") else f"{text}.0"
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) for x in v)
    if isinstance(v, dict):
        return assignments(v)
    return str(v)


def assignments(values: dict) -> str:
    """`{"learning_rate": 0.010093959, "hidden_units": 64}` → `learning_rate=0.0101, hidden_units=64`."""
    return ", ".join(f"{k}={value(v)}" for k, v in values.items())
