"""Output folders of the Vertex jobs a run's cache may serve (tuning, training): no two jobs write one folder, and a
job served from the cache hands on the folder of the job that made it.

The plan step before a job is cached and names a root, unique to the job's inputs and settings. `claim` gives the
job its folder under that root: the folder `record` noted there once a job completed (the job's inputs are the
same, so Vertex serves it from its cache and nothing writes there again), else a new folder named for the run. A run
beside another one (a schedule and a run on merge) or after a failed job writes a folder of its own.
"""

import json
import re

RECORD = "completed.json"  # under the root: the folder of a completed job


def run_folder(run_name: str) -> str:
    """The folder name of a run: the last part of its pipeline job name, in lower-case letters, digits and -."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_name.rsplit("/", 1)[-1].lower()).strip("-")
    if not name:
        raise ValueError(f"no run name to name an output folder after: {run_name!r}")
    return name


def claim(root: str, run_name: str) -> str:
    """The output folder of the job after the plan whose root is `root`, for the run `run_name`."""
    from core.storage import read_bytes

    recorded = read_bytes(f"{root.rstrip('/')}/{RECORD}")
    if recorded:
        folder = json.loads(recorded)["directory"]
        print(f"the job that completed in {folder} is served from the cache: its folder is reused")
        return folder
    folder = f"{root.rstrip('/')}/{run_folder(run_name)}"
    print(f"no job completed under {root}: this run's job writes {folder}")
    return folder


def record(root: str, folder: str, gcp_resources: str) -> None:
    """Note under `root` that the job of `gcp_resources` (GCPC's record of it) completed in `folder`."""
    from core.storage import open_write

    job = json.loads(gcp_resources)["resources"][0]["resourceUri"].split("/v1/", 1)[-1]
    with open_write(f"{root.rstrip('/')}/{RECORD}") as f:
        f.write(json.dumps({"directory": folder, "job": job}).encode())
