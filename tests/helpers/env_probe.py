"""A stand-in trial that records what it was given: its CLUSTER_SPEC and TF_CONFIG (as JSON) in
`$AIP_MODEL_DIR/cluster.json`, then reports `accuracy` 0.5 through the real hypertune."""

import json
import os

import hypertune

os.makedirs(os.environ["AIP_MODEL_DIR"], exist_ok=True)
with open(os.path.join(os.environ["AIP_MODEL_DIR"], "cluster.json"), "w") as f:
    json.dump({name: json.loads(os.environ[name]) for name in ("CLUSTER_SPEC", "TF_CONFIG") if name in os.environ}, f)
hypertune.HyperTune().report_hyperparameter_tuning_metric(
    hyperparameter_metric_tag="accuracy", metric_value=0.5, global_step=1
)
