"""pipelines.rehearsal.redirect: the rehearsing process is redirected to the Vertex AI API double only while the
rehearsal runs; after it, Google's clients, credentials look-up and GCPC's polling are Google's again, also in modules
first imported during the rehearsal."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CODE = """
import sys
import google.auth
import requests.sessions
from google.api_core import grpc_helpers
from pipelines.rehearsal import redirect

from core.import_hooks import WrapExecution

finders = lambda: sum(isinstance(f, WrapExecution) for f in sys.meta_path)
before = (google.auth.default, requests.sessions.Session.request, grpc_helpers.create_channel, finders())
with redirect.redirected("127.0.0.1:1", "http://127.0.0.1:2", "p-rehearsal", "/tmp/mount"):
    credentials, project = google.auth.default()
    from google_cloud_pipeline_components.container.v1.gcp_launcher import job_remote_runner as runner
    from kfp.dsl.types import artifact_types
    during = (credentials.token, project, runner._POLLING_INTERVAL_IN_SECONDS, artifact_types._GCS_LOCAL_MOUNT_PREFIX)
    patched = before != (google.auth.default, requests.sessions.Session.request, grpc_helpers.create_channel)
after = (google.auth.default, requests.sessions.Session.request, grpc_helpers.create_channel, finders())
print(during, patched, after == before, runner._POLLING_INTERVAL_IN_SECONDS, artifact_types._GCS_LOCAL_MOUNT_PREFIX)
"""


def test_the_process_is_redirected_only_while_the_rehearsal_runs():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "('rehearsal', 'p-rehearsal', 0.25, '/tmp/mount/') True True 20 /gcs/"
