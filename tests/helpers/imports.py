"""The project's own imports, read from the source (ast): which first-party modules a module imports or starts
(`[sys.executable, "-m", MODULE, ...]`), and the files a set of entry modules needs."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("components", "core", "models", "pipelines", "serving", "trainer")


def module_file(name: str) -> Path | None:
    """The file of a first-party module or package (`a.b`: a/b.py or a/b/__init__.py), None if there is none."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """First-party modules `path` imports anywhere (top level or inside functions) or runs with `-m`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {
                f"{node.module}.{alias.name}" for alias in node.names if module_file(f"{node.module}.{alias.name}")
            }
        elif isinstance(node, ast.List):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found |= {
                words[i + 1] for i, word in enumerate(words[:-1]) if word == "-m" and isinstance(words[i + 1], str)
            }
    return {name for name in found if name.split(".")[0] in PACKAGES and module_file(name)}


def needed_files(entry_modules: list[str]) -> set[Path]:
    """The files of `entry_modules` and of every first-party module they reach, with their packages' __init__.py."""
    todo, seen = list(entry_modules), set()
    while todo:
        name = todo.pop()
        path = module_file(name)
        if path is None or path in seen:
            continue
        seen.add(path)
        parents = name.split(".")
        todo += [".".join(parents[:i]) for i in range(1, len(parents))] + sorted(imported_modules(path))
    return seen


# The modules each image runs: the trainer's and the server's entry points, every step of the components image; the
# images that train (the trainer's, and the components image's local launcher and study) also the networks of
# `models`, which the trainer imports by the name the config gives (trainer.model).
ENTRY_MODULES = {
    "trainer.Dockerfile": ["trainer.task", "models"],
    "serving.Dockerfile": ["serving.vertex_container"],
    "components.Dockerfile": [module_name(p) for p in sorted((ROOT / "components").rglob("*.py"))] + ["models"],
}


def external_modules(paths) -> set[str]:
    """The other distributions' modules `paths` import anywhere (standard library included): `import a.b` as
    `a.b`, `from a.b import c` as `a.b`."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(Path(path).read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
    return {name for name in found if name.split(".")[0] not in PACKAGES and name != "__future__"}
