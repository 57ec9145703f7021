"""The local Vertex AI API double, on 127.0.0.1, in layers (each module imports only those listed before it):

- `messages.py`: between the double's dicts and aiplatform_v1's messages; Vertex's list filters and pages;
- `context.py`: what the services share: the registry, IAM, the request log, the errors, Vertex's request checks;
- `operations.py`: the long-running operations;
- `model_service.py`, `endpoint_service.py` (deployed models' containers, online prediction), `job_service.py`
  (custom, tuning and batch prediction jobs): the services, answered from the registry and the jobs (registry.py,
  jobs.py);
- `app.py`: `VertexDouble`, the services on gRPC (the GAPIC clients) and REST (GCPC's launchers), every request
  parsed into its aiplatform_v1 message and recorded one JSON line each.
"""

from pipelines.rehearsal.api.app import VertexDouble

__all__ = ["VertexDouble"]
