"""Pipeline factory, targets (vertex / kubeflow / local) and the `python -m pipelines` CLI."""
