"""Put first on PYTHONPATH by a rehearsal: redirects this process's Vertex AI clients to the local API double."""

from pipelines.rehearsal.redirect import install_from_env

install_from_env()
