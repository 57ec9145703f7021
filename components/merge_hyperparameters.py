"""The hyperparameters of the final Vertex training: the pipeline's, overridden by the best trial's."""


def merge_hyperparameters(defaults: dict, best: dict) -> dict:
    """KFP step (Vertex): the pipeline's hyperparameters overridden by the best trial's values.

    Args:
        defaults: The pipeline's hyperparameters.
        best: The best trial's parameter values.
    """
    from components.lib.study.spec import with_best_trial

    return with_best_trial(defaults, best)
