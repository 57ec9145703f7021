"""A study trial stand-in with the trainer's own flags (`trainer.flags`) and metric reports (`EpochLog`): one epoch
whose Keras logs come from LOGS by `--hidden-units`, where the lowest val_loss (2) is neither the highest (1) nor the
lowest (3) val_accuracy."""

import sys

from trainer import callbacks, flags

LOGS = {
    1: {"loss": 0.4, "accuracy": 0.95, "val_loss": 0.5, "val_accuracy": 0.9},
    2: {"loss": 0.1, "accuracy": 0.85, "val_loss": 0.2, "val_accuracy": 0.8},
    3: {"loss": 0.8, "accuracy": 0.75, "val_loss": 0.9, "val_accuracy": 0.7},
}

args = flags.parse_args(["--data-dir", "unused", *sys.argv[1:]])  # the job dir: AIP_MODEL_DIR's parent
callbacks.EpochLog(f"{args.job_dir}/history.jsonl", args.hypertune_metric_tag, resume=False).on_epoch_end(
    0, LOGS[args.hidden_units]
)
