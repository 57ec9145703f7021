"""A cheap stand-in for `trainer.task` in study tests: a known optimum, reported through the real hypertune.

accuracy = 1 − (log10(learning_rate) + 2)² / 4 − ((hidden_units − 100) / 200)²  → best at lr=0.01, units=100.
`--mode crash` exits 3 before reporting; `--mode silent` exits 0 without reporting. Other flags are ignored (a Katib
trial passes the trainer's). Reports under the study's metric name (`CLOUD_ML_HP_METRIC_TAG`), as the trainer does.
"""

import argparse
import math
import os
import sys
import time

import hypertune

p = argparse.ArgumentParser()
p.add_argument("--learning-rate", type=float, required=True)
p.add_argument("--hidden-units", type=int, default=100)
p.add_argument("--mode", default="ok")
p.add_argument("--sleep", type=float, default=0.3)
args, _ = p.parse_known_args()  # a trial gets the trainer's other flags too
os.makedirs(os.environ["AIP_MODEL_DIR"], exist_ok=True)
time.sleep(args.sleep)
if args.mode == "crash":
    print("stand-in: crashing as asked", flush=True)
    sys.exit(3)
if args.mode != "silent":
    accuracy = 1 - (math.log10(args.learning_rate) + 2) ** 2 / 4 - ((args.hidden_units - 100) / 200) ** 2
    reporter, tag = hypertune.HyperTune(), os.environ["CLOUD_ML_HP_METRIC_TAG"]
    reporter.report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag=tag, metric_value=accuracy - 0.1, global_step=1
    )
    reporter.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=tag, metric_value=accuracy, global_step=2)
