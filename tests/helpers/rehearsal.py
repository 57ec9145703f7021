"""What the rehearsal tests share: the platform of a production-like rehearsal, the CLI in a subprocess, the requests a
rehearsal recorded, a TensorFlow script reaching the rehearsal's Cloud Storage."""

import json
import os
import subprocess
import sys
from pathlib import Path

IDENTITY = [
    "platform.project=my-project",  # the rehearsal's project: the TensorBoard must be in it
    "platform.service_account=runner@my-project.iam.gserviceaccount.com",
    "platform.network=projects/123456789/global/networks/vpc",
    "platform.encryption_spec_key_name=projects/my-project/locations/us-central1/keyRings/ml/cryptoKeys/tfpipe",
    "platform.tensorboard=projects/my-project/locations/us-central1/tensorboards/42",
    "platform.labels={env: test}",
    "platform.model_labels={team: ml}",
    "platform.keep_previous=0",
    "platform.data_prep={runner: dataflow, dataflow_min_records: 0}",  # the digits are few: Dataflow all the same
    "study.max_trial_count=2",
    "study.parallel_trial_count=2",
]


SETS = [arg for item in IDENTITY for arg in ("--set", item)]


def recorded(out: Path, method: str) -> list[dict]:
    lines = (out / "vertex" / "vertex_requests.jsonl").read_text().splitlines()
    return [r["request"] for r in map(json.loads, lines) if r["method"] == method]


def tensorflow_on_gcs(script: str, emulator: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`script` in a Python process whose TensorFlow reaches gs:// through the rehearsal's proxy to `emulator`; it
    must succeed."""
    from pipelines.rehearsal import gcs

    with gcs.tensorflow_gcs(emulator, tmp_path / "tls") as env:
        result = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, **env, "TF_CPP_MIN_LOG_LEVEL": "3"},
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    return result
