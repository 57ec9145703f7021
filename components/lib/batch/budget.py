"""The error budget of a batch prediction run, the same rule on every target."""


class BatchPredictionError(RuntimeError):
    """The batch run predicted, but more of its instances failed than its error budget allows (user-facing)."""


def check_error_budget(succeeded: int, failed: int, max_error_fraction: float, where: str = "") -> str:
    """The counts as a sentence, or BatchPredictionError when the run predicted nothing or the failed share exceeds
    `max_error_fraction` (0: no failure allowed; 1: any share; every failing instance has its errors line). The same
    rule on every target: Vertex's job itself succeeds whatever its instances do."""
    if not 0 <= max_error_fraction <= 1:
        raise ValueError(f"max_error_fraction must be in [0, 1], got {max_error_fraction}")
    total = succeeded + failed
    counts = f"{failed} of {total} instances failed, {succeeded} succeeded"
    if total == 0:
        raise BatchPredictionError(f"no instances were predicted: the input holds none{where}")
    if failed / total > max_error_fraction:
        raise BatchPredictionError(
            f"{counts} ({failed / total:.1%}), above max_error_fraction {max_error_fraction:.1%}{where}; each "
            "failure's reason is in prediction.errors_stats-*"
        )
    return f"{counts} ({failed / total:.1%}; max_error_fraction {max_error_fraction:.1%})"
