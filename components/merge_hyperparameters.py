"""The hyperparameters of the final Vertex training: the pipeline's, overridden by the best trial's."""


def merge_hyperparameters(defaults: dict, best: dict, warm_start_from: str = "") -> dict:
    """KFP step (Vertex): the pipeline's hyperparameters overridden by the best trial's values.

    Args:
        defaults: The pipeline's hyperparameters.
        best: The best trial's parameter values.
        warm_start_from: The best trial's kept best checkpoint folder to start the training from ("": none).
    """
    from components.lib.study.spec import with_best_trial

    return with_best_trial(defaults, best, warm_start_from)
