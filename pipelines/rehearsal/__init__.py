"""Rehearse a compiled Vertex AI pipeline on this machine (`python -m pipelines rehearse`).

- `run.py` executes the compiled YAML with kfp.local (DAG, conditions, OneOf, importers, parameter passing) and runs
  container tasks (the Google Cloud Pipeline Components' launchers) as local processes, forked from one that
  imported the launchers once (`warm_launchers.py`);
- `api/` is the local Vertex AI API double those launchers and this project's Vertex steps talk to (gRPC and REST
  on 127.0.0.1), recording every request;
- `registry.py` holds its models and endpoints, `jobs.py` does its jobs' work with the project's local
  equivalents (multi-worker launcher, local study, batch predictor, model server);
- `redirect.py` (and `shim/sitecustomize.py` for subprocesses) points the Google clients at the double.
"""
