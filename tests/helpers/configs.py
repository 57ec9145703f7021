"""Configurations the tests pass to the CLI: the shipped tfpipe.yaml, as it is and as its header asks to edit it, and
real-looking images to compile with (compile refuses the placeholder ones)."""

from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "tfpipe.yaml"

IMAGE_SETS = [
    arg
    for name in ("components", "trainer", "serving")
    for arg in ("--set", f"platform.{name}_image=europe-west4-docker.pkg.dev/acme-ml/tfpipe/{name}:1")
]


def edited_shipped_config(folder: Path) -> Path:
    """tfpipe.yaml as its header asks to edit it (docs/guides/vertex.md): the example project ids replaced."""
    path = folder / "tfpipe.yaml"
    path.write_text(SHIPPED.read_text().replace("my-dev-project", "acme-ml-dev").replace("my-project", "acme-ml-prod"))
    return path
