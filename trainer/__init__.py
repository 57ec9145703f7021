"""Training application: `python -m trainer.task` (also the trainer container's entry point)."""
