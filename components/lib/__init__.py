"""Libraries the steps share (data sources, storage, records, the model repository, the study spec, Vertex AI
and Kubernetes clients); no pipeline step lives here."""
