"""Doubles of the services the project talks to, as strict as the services: the Kubernetes API with the operators (k8s/), Dataflow, the Vertex AI GAPIC stubs."""
