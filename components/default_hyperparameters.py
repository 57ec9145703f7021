"""The pipeline's own hyperparameters on Vertex AI (the tuning job's fixed part)."""


def default_hyperparameters(batch_size: int, learning_rate: float) -> dict:
    """KFP step (Vertex): the pipeline's own hyperparameters (used as they are when tuning is off).

    Args:
        batch_size: The pipeline's batch size per replica.
        learning_rate: The pipeline's learning rate.
    """
    from components.lib.study.spec import pipeline_hyperparameters

    return pipeline_hyperparameters(batch_size, learning_rate)
