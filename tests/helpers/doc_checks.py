"""The checks of tests/contract/repository/test_docs.py: the commands and config snippets of README.md and docs/**/*.md (fenced bash, yaml
and python blocks, inline code) read out and checked against the code: the click CLI (introspected, never run),
the config loader, the Makefile, the repository's files, cloudbuild.yaml and the docs' own headings. A check
returns its problems, each `FILE:LINE: what is wrong` and the offending snippet."""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import re
import shutil
import subprocess
import tempfile
import types
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import click
import yaml
from pydantic import BaseModel

from pipelines.cli import cli
from pipelines.config import (
    SECTIONS,
    Config,
    ConfigError,
    Platform,
    env_overrides,
    load_config,
    parse_set,
    profile_names,
)
from serving.command import serve
from tests.helpers.imports import imported_modules
from trainer.builder import DEFAULT_BUILDER
from trainer.flags import TRAINER_MODULE, declared, flag

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))]
CONFIG_KEYS = {*SECTIONS, "profiles"}
LANGUAGES = {"bash": "bash", "sh": "bash", "shell": "bash", "yaml": "yaml", "yml": "yaml", "python": "python"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
# a doc placeholder: `...`, a shell variable or substitution, <name>, or an UPPER_CASE word (NAME, PROJECT, F1)
PLACEHOLDER = re.compile(r"\.\.\.|…|[$<>]|(?<![A-Za-z0-9])[A-Z][A-Z0-9_]*(?![A-Za-z0-9])")
PYTHON = re.compile(r"(?:\S*/)?python(?:3(?:\.\d+)?)?")
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
NUMBER = re.compile(r"-\d+(\.\d+)?")
CLIS = {"pipelines": cli, "serving": serve}
PIPELINE_SECTIONS = {"training": ("parameters",), "batch_prediction": ("batch",)}
KFP_URL = re.compile(r"https://([\w${}-]+?)-kfp\.pkg\.dev/[^/\s`'\"]+/([\w${}-]+)")
DOCKER_URI = re.compile(r"(?<![\w.-])([\w${}-]+?)-docker\.pkg\.dev/([^/\s`'\"]+)/([\w${}-]+)/([\w${}.-]+)")
IMAGE_FIELD = re.compile(r"^\s*(\w+_image):\s*(\S+)")


def is_placeholder(text: str) -> bool:
    return bool(PLACEHOLDER.search(text))


# --- reading the docs --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language (bash, yaml, python; "" for any other) and its numbered lines."""

    language: str
    lines: tuple[tuple[int, str], ...]

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    @property
    def first(self) -> int:
        return self.lines[0][0] if self.lines else 0

    def line_of(self, needle: str) -> int:
        return next((number for number, line in self.lines if needle in line), self.first)


@dataclass(frozen=True)
class Span:
    """Inline code (its newlines made spaces) and the line it starts on."""

    line: int
    text: str


@dataclass(frozen=True)
class Doc:
    """A markdown page, read: its fenced blocks, inline code, prose and headings."""

    name: str  # from the repository root
    blocks: tuple[Block, ...]
    spans: tuple[Span, ...]
    prose: str  # the text with code blocks and spans blanked, lines kept: where the links are
    headings: tuple[str, ...]

    def where(self, line: int, message: str, snippet: str) -> str:
        return f"{self.name}:{line}: {message}\n    {' '.join(snippet.split())[:240]}"

    def commands(self) -> list[tuple[int, str, list[str]]]:
        """The shell commands of the bash blocks: line, logical line, words."""
        return [
            (number, line, words)
            for block in self.blocks
            if block.language == "bash"
            for number, line in logical_lines(block)
            for words in shell_commands(line)
        ]


def parse_doc(name: str, text: str) -> Doc:
    """Read a markdown page: fenced blocks (indented ones in list items too), inline code, headings."""
    blocks, prose = [], []
    fence: tuple[int, str, str, list[tuple[int, str]]] | None = None  # indent, marker, language, lines
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = (len(match.group(1)), match.group(2), LANGUAGES.get(match.group(3).lower(), ""), [])
            prose.append("" if match else line)
            continue
        prose.append("")
        if match and match.group(2).startswith(fence[1]) and not match.group(3):
            blocks.append(Block(fence[2], tuple(fence[3])))
            fence = None
        else:
            indent = fence[0] if line[: fence[0]].isspace() else 0
            fence[3].append((number, line[indent:]))
    unfenced = "\n".join(prose)
    spans = [
        Span(unfenced.count("\n", 0, m.start()) + 1, " ".join(m.group(2).split())) for m in SPAN.finditer(unfenced)
    ]
    blanked = SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), unfenced)
    headings = tuple(m.group(1) for m in HEADING.finditer(unfenced))
    return Doc(name, tuple(blocks), tuple(spans), blanked, headings)


@cache
def load_doc(name: str) -> Doc:
    return parse_doc(name, (ROOT / name).read_text())


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (a link's text, code's content) in lower case, punctuation dropped,
    spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(doc: Doc) -> set[str]:
    """Every heading's anchor; a repeated one gets GitHub's -1, -2, ... suffix."""
    found: set[str] = set()
    for heading in doc.headings:
        anchor, n = slug(heading), 0
        while anchor in found:
            n += 1
            anchor = f"{slug(heading)}-{n}"
        found.add(anchor)
    return found


def line_in(path: str, needle: str) -> int:
    """The first line of a repository file holding `needle` (0: none)."""
    lines = (ROOT / path).read_text().splitlines()
    return next((n for n, line in enumerate(lines, 1) if needle in line), 0)


# --- shell -------------------------------------------------------------------------------------------------------


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """A block's lines joined at a trailing backslash; a synopsis's indented `[--option ...]` or `--option` line is
    joined to the line above too."""
    joined: list[tuple[int, str]] = []
    continued = False
    for number, line in block.lines:
        stripped = line.strip()
        if joined and (continued or (line[:1].isspace() and stripped[:1] in ("[", "-"))):
            joined[-1] = (joined[-1][0], f"{joined[-1][1]} {stripped}")
        else:
            joined.append((number, stripped))
        continued = joined[-1][1].endswith("\\")
        if continued:
            joined[-1] = (joined[-1][0], joined[-1][1][:-1])
    return joined


def shell_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line as words: quotes removed, `$(...)` kept whole, comments dropped, split at
    `;`, `&`, `&&`, `||` and pipes. A synopsis's `[...]` are dropped; a `|` inside them or inside a word
    (`vertex|kubeflow`) stays an alternative, not a pipe."""
    commands: list[list[str]] = [[]]
    word, started = "", False
    quote, substitution, depth, word_depth = "", 0, 0, 0

    def end_word() -> None:
        nonlocal word, started
        if started:
            commands[-1].append(word)
        word, started = "", False

    i = 0
    while i < len(line):
        c = line[i]
        i += 1
        if quote:
            quote = "" if c == quote else quote
            word += "" if not quote else c
        elif substitution:
            word += c
            substitution += {"(": 1, ")": -1}.get(c, 0)
        elif c in "'\"":
            quote, started = c, True
        elif c == "\\" and i < len(line):
            word, started, i = word + line[i], True, i + 1
        elif c == "$" and line.startswith("(", i):
            word, started, substitution, i = word + "$(", True, 1, i + 1
        elif c.isspace():
            end_word()
        elif c == "#" and not started:
            break
        elif c == "[" and not started:
            depth += 1
        elif c == "[" or (c == "]" and word_depth):
            word, started, word_depth = word + c, True, word_depth + (1 if c == "[" else -1)
        elif c == "]" and depth:
            end_word()
            depth -= 1
        elif c == ";" or (c in "&|" and not started and depth == 0):
            end_word()
            commands.append([])
            while i < len(line) and line[i] in "&|;":
                i += 1
        else:
            word, started = word + c, True
    end_word()
    return [words for words in commands if words]


def without_assignments(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """A command's leading NAME=VALUE assignments, and the command."""
    env = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words[0].partition("=")
        env[name], words = value, words[1:]
    return env, words


def option_value(words: list[str], option: str) -> str | None:
    for i, word in enumerate(words):
        if word == option and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(option + "="):
            return word.split("=", 1)[1]
    return None


# --- the code the docs are checked against -----------------------------------------------------------------------


def module_file(module: str, main: bool = False) -> Path | None:
    """A module's file in the repository (`main`: what `python -m` runs of a package, its __main__.py)."""
    base = ROOT / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / ("__main__.py" if main else "__init__.py")):
        if path.is_file():
            return path
    return None


@cache
def repository_packages() -> frozenset[str]:
    return frozenset(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())


@cache
def defined_names(path: Path) -> dict[str, ast.stmt]:
    """The names a module defines at its top level (functions, classes, assignments, imports)."""
    names: dict[str, ast.stmt] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id: node for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0]: node for a in node.names}
    return names


def class_members(node: ast.ClassDef) -> set[str]:
    """A class's methods and class attributes, and the attributes its methods set on self."""
    members = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for n in ast.walk(node):
        for target in n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []:
            if isinstance(target, ast.Name) and n in node.body:
                members.add(target.id)
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                members.add(target.attr)
    return members


@cache
def argparse_options(path: Path) -> frozenset[str]:
    """The option strings of a module's argparse `add_argument` calls (read, not imported)."""
    return frozenset(
        arg.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        for arg in node.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")
    )


@cache
def options(command: click.Command) -> dict[str, click.Option | None]:
    """A command's option strings (secondary ones such as `--no-tune` too), and the help options (None)."""
    found: dict[str, click.Option | None] = {"-h": None, "--help": None}
    for param in command.params:
        if isinstance(param, click.Option):
            found |= dict.fromkeys((*param.opts, *param.secondary_opts), param)
    return found


@cache
def makefile() -> tuple[frozenset[str], dict[str, str]]:
    """The Makefile's targets, and for each target whose recipe passes $(ARGS) to `python -m pipelines VERB`, VERB."""
    targets: set[str] = set()
    verbs: dict[str, str] = {}
    variables: dict[str, str] = {}
    target = ""
    for line in (ROOT / "Makefile").read_text().splitlines():
        assignment = re.match(r"(?:export\s+)?(\w+)\s*[:?]?=\s*(.*)", line)
        if assignment:
            variables[assignment.group(1)] = assignment.group(2).strip()
        line = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), line)
        rule = re.match(r"([^\s:=#][^:=]*?)\s*:(?!=)", line)
        if rule:
            target = rule.group(1).split()[0]
            targets.update(rule.group(1).split())
        verb = re.search(r"-m pipelines (\S+) \$\(ARGS\)", line)
        if line.startswith("\t") and verb:
            verbs[target] = verb.group(1)
    return frozenset(targets - {".PHONY"}), verbs


@cache
def image_names() -> dict[str, str]:
    """Platform's image fields and the image each names: trainer_gpu_image -> trainer-gpu."""
    return {f: f.removesuffix("_image").replace("_", "-") for f in Platform.model_fields if f.endswith("_image")}


def config_field(path: tuple[str, ...]) -> bool:
    """Whether a dotted config path names a field (any key below a mapping such as labels or step_limits)."""
    node: typing.Any = Config
    for part in path:
        if isinstance(node, types.UnionType) or typing.get_origin(node) is typing.Union:
            node = next(a for a in typing.get_args(node) if a is not type(None))
        if isinstance(node, type) and issubclass(node, BaseModel):
            if part not in node.model_fields:
                return False
            node = node.model_fields[part].annotation
        elif typing.get_origin(node) is dict:
            node = typing.get_args(node)[1]
        else:
            return False
    return True


@cache
def top_level() -> tuple[str, ...]:
    """The repository's top-level files and folders (not what .gitignore ignores), longest first."""
    ignore = ROOT.joinpath(".gitignore").read_text().split()
    names = [
        p.name
        for p in ROOT.iterdir()
        if p.name != ".git" and not any(fnmatch.fnmatch(p.name, i.rstrip("/")) for i in ignore)
    ]
    return tuple(sorted(names, key=len, reverse=True))


@cache
def path_pattern() -> re.Pattern[str]:
    """A repository path in code: a top-level name, then `/...` or a `#anchor`; or an output under build/."""
    rest = r"[^\s`'\"()\[\],;|]*"
    tops = "|".join(map(re.escape, top_level()))
    return re.compile(rf"(?<![\w./~$@:-])(?:build/{rest}|(?:{tops})(?:[/#]{rest})?(?![\w.-]))")


@cache
def build_outputs() -> frozenset[str]:
    """The files cloudbuild.yaml writes under build/."""
    return frozenset(re.findall(r"\bbuild/[\w.-]+", (ROOT / "cloudbuild.yaml").read_text()))


@cache
def cloudbuild() -> tuple[dict[str, str], list[dict]]:
    """cloudbuild.yaml's substitutions and steps."""
    build = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    return {k: str(v) for k, v in build["substitutions"].items()}, build["steps"]


def cloudbuild_commands() -> list[list[str]]:
    """The shell commands of cloudbuild.yaml's bash steps, `${_NAME}` left as written."""
    scripts = [step["args"][-1] for step in cloudbuild()[1] if step.get("entrypoint") == "bash"]
    block = Block("bash", tuple(enumerate("\n".join(scripts).splitlines(), 1)))
    return [words for _, line in logical_lines(block) for words in shell_commands(line)]


# --- shell syntax and gcloud ---------------------------------------------------------------------------------------


def shell(doc: Doc) -> list[str]:
    """Every bash block parses (`bash -n`: the syntax, nothing run)."""
    problems = []
    for block in (b for b in doc.blocks if b.language == "bash"):
        result = subprocess.run(
            [shutil.which("bash") or "bash", "-n"], input=block.text, capture_output=True, text=True
        )
        for line in result.stderr.splitlines():
            where = re.match(r"(?:\S*bash: )?line (\d+): (.*)", line)
            if where and where.group(2).startswith("`"):
                continue  # bash repeating the offending line
            number = int(where.group(1)) if where else 0
            at = block.lines[number - 1] if 0 < number <= len(block.lines) else block.lines[-1]
            problems.append(doc.where(at[0], f"bash -n: {where.group(2) if where else line}", at[1]))
        if result.returncode and not result.stderr:
            problems.append(doc.where(block.first, f"bash -n exits {result.returncode}", block.lines[0][1]))
    return problems


@cache
def gcloud_tree() -> dict | None:
    """The installed gcloud CLI's commands and flags (its static completion tree, the SDK's
    data/cli/gcloud_completions.py), or None without gcloud."""
    found = shutil.which("gcloud")
    path = Path(found).resolve().parents[1] / "data" / "cli" / "gcloud_completions.py" if found else None
    if path is None or not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("gcloud_completions", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.STATIC_COMPLETION_CLI_TREE


def check_gcloud(words: list[str], tree: dict) -> list[str]:
    """A `gcloud ...` command: its command path is a gcloud command and each --flag one of that command's (or a
    gcloud-wide flag)."""
    node, path, flags = tree, ["gcloud"], dict(tree["flags"])
    args = words[1:]
    i = 0
    while i < len(args) and args[i] in node["commands"]:
        node = node["commands"][args[i]]
        path.append(args[i])
        flags |= node["flags"]
        i += 1
    if node["commands"] and not (i < len(args) and (is_placeholder(args[i]) or args[i] in ("-h", "--help"))):
        return [f"{' '.join(path)}: no command {args[i] if i < len(args) else ''!r}"]
    return [
        f"{' '.join(path)}: no flag {name}"
        for name in (a.split("=", 1)[0] for a in args[i:] if a.startswith("--"))
        if name not in flags and not (name.startswith("--no-") and f"--{name[5:]}" in flags)
    ]


def gcloud(doc: Doc) -> list[str]:
    """Every gcloud command of the doc's bash blocks names a gcloud command and its flags."""
    tree = gcloud_tree()
    assert tree is not None, "gcloud is not installed"
    return [
        doc.where(n, m, line)
        for n, line, words in doc.commands()
        if words[:1] == ["gcloud"]
        for m in check_gcloud(words, tree)
    ]


def expanded_commands(doc: Doc) -> list[tuple[int, list[str]]]:
    """The doc's bash commands with each one-level `for VAR in WORDS; do ... done` loop unrolled ($VAR and ${VAR}
    replaced by each word): line, words."""
    found: list[tuple[int, list[str]]] = []
    loop: tuple[str, list[str]] | None = None
    body: list[tuple[int, list[str]]] = []
    for n, _, words in doc.commands():
        if words[:1] == ["for"] and words[2:3] == ["in"]:
            loop, body = (words[1], words[3:]), []
        elif loop and words == ["done"]:
            name, values = loop
            found += [
                (m, [w.replace("${" + name + "}", v).replace(f"${name}", v) for w in command])
                for v in values
                for m, command in body
            ]
            loop = None
        elif loop:
            body += [(n, words[1:] if words[:1] == ["do"] else words)] if words != ["do"] else []
        else:
            found.append((n, words))
    return found


def setup_problems(name: str = "docs/guides/vertex.md") -> list[str]:
    """The set-up (`gcloud` commands) of `name` enables every API the pre-flight checks require of a run with Dataflow,
    a network and a key of the project, grants the runs' account ($RUNNER) each role they check, each service agent
    of the project ($PROJECT_NUMBER) roles/cloudkms.cryptoKeyEncrypterDecrypter on $KEY, and makes $KEY the bucket's
    default key."""
    from pipelines import preflight

    commands = [words for _, words in expanded_commands(load_doc(name))]
    enabled = {w for c in commands if c[:3] == ["gcloud", "services", "enable"] for w in c[3:] if not w.startswith("-")}
    platform = Platform(
        project="acme-ml",
        location="europe-west4",
        network="projects/1/global/networks/vpc",
        encryption_spec_key_name="projects/acme-ml/locations/europe-west4/keyRings/r/cryptoKeys/k",
    )
    problems = [f"{name}: no gcloud services enable {s}" for s in preflight.required_services(platform)]
    problems = [p for p in problems if p.rsplit(" ", 1)[1] not in enabled]

    def granted(resource: list[str], member: str, role: str) -> bool:
        return any(
            c[: len(resource)] == resource
            and option_value(c, "--member") == member
            and option_value(c, "--role") == role
            for c in commands
        )

    project = ["gcloud", "projects", "add-iam-policy-binding", "$PROJECT"]
    for role, _, why in preflight.RUNNER_ROLES + preflight.DATAFLOW_ROLES:
        if not granted(project, "serviceAccount:$RUNNER", role):
            problems.append(f"{name}: $RUNNER is not granted {role} in the project ({why})")
    bucket = ["gcloud", "storage", "buckets", "add-iam-policy-binding", "gs://$BUCKET"]
    if not granted(bucket, "serviceAccount:$RUNNER", preflight.BUCKET_ROLE[0]):
        problems.append(f"{name}: $RUNNER is not granted {preflight.BUCKET_ROLE[0]} on gs://$BUCKET")
    key = ["gcloud", "kms", "keys", "add-iam-policy-binding", "$KEY"]
    for domain, whose, _ in preflight.KEY_AGENTS:
        if not granted(key, f"serviceAccount:service-$PROJECT_NUMBER@{domain}", preflight.ENCRYPTER):
            problems.append(f"{name}: the {whose} service agent is not granted {preflight.ENCRYPTER} on $KEY")
    update = ["gcloud", "storage", "buckets", "update", "gs://$BUCKET"]
    if not any(c[:5] == update and option_value(c, "--default-encryption-key") == "$KEY" for c in commands):
        problems.append(f"{name}: gs://$BUCKET does not get $KEY as its default key")
    return problems


# --- commands ----------------------------------------------------------------------------------------------------


def check_set(assignment: str) -> list[str]:
    """`--set SECTION.FIELD=VALUE`: a real config path, and a value the loader takes unless it is a placeholder."""
    key, _, value = assignment.partition("=")
    if is_placeholder(key):
        return []
    try:
        path = parse_set(assignment).path
    except ConfigError as e:
        return [str(e)]
    if not config_field(path):
        return [f"--set {key}: no such config field"]
    if is_placeholder(value):
        return []
    try:
        load_config(sets=[assignment], environ={})
    except ConfigError as e:
        return [str(e)]
    return []


def check_param(assignment: str, sections: tuple[str, ...]) -> list[str]:
    """`--param NAME=VALUE`: an input of the pipeline (its config section's field), with a value of its type."""
    name, _, value = assignment.partition("=")
    if is_placeholder(name):
        return []
    section = next((s for s in sections if config_field((s, name))), None)
    if section is None:
        return [f"--param {name}: no such input of the pipeline (the config's {' or '.join(sections)} fields)"]
    if is_placeholder(value):
        return []
    return [f"--param {assignment}: {e}" for e in check_set(f"{section}.{name}={value}")]


def check_click(root: click.Command, prog: str, words: list[str], complete: bool, profiles: set[str]) -> list[str]:
    """A click command line (a synopsis too: `a|b` alternatives, placeholders): its commands and options exist,
    choices are among the choices; `complete` (a doc's command, not a fragment in prose): required options given.
    Then its `--set`, `--param` and `--profile` values."""
    problems: list[str] = []
    current: list[click.Command] = [root]
    parent: click.Group | None = None
    paths = {root: prog}
    given: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        word, i = words[i], i + 1
        if word in ("|", "...") or word.startswith("("):
            continue
        if word.startswith("-") and word != "-" and not NUMBER.fullmatch(word):
            name, eq, value = word.partition("=")
            option = None
            for alternative in name.split("/"):
                problems += [f"{paths[c]}: no option {alternative}" for c in current if alternative not in options(c)]
                option = option or next((options(c)[alternative] for c in current if alternative in options(c)), None)
            if option is not None and not option.is_flag and not option.count and not eq and i < len(words):
                value, i = words[i], i + 1
            given.setdefault(name, []).append(value)
            if option is not None and isinstance(option.type, click.Choice):
                problems += [
                    f"{paths[current[0]]}: {name} {piece}: not one of {', '.join(option.type.choices)}"
                    for piece in value.split("|")
                    if piece and not is_placeholder(piece) and piece not in option.type.choices
                ]
        elif isinstance(current[0], click.Group):
            group = current[0]
            pieces = [p for p in word.split("|") if p]
            unknown = [p for p in pieces if p not in group.commands and not is_placeholder(p)]
            problems += [f"{paths[group]}: no command {p!r}" for p in unknown]
            if unknown:
                return problems
            chosen = [group.commands[p] for p in pieces if p in group.commands]
            if chosen:
                current, parent = chosen, group
                paths |= {c: f"{paths[group]} {c.name}" for c in chosen}
        elif parent is not None and "|" in word:  # `list|pause NAME|resume NAME`: the alternatives go on
            for c in (parent.commands[p] for p in word.split("|") if p in parent.commands):
                current, paths[c] = [*current, c], f"{paths[parent]} {c.name}"
    if complete and not given.keys() & {"-h", "--help"}:
        problems += [
            f"{paths[c]}: {p.opts[0]} is required"
            for c in current
            for p in c.params
            if isinstance(p, click.Option) and p.required and not given.keys() & {*p.opts, *p.secondary_opts}
        ]
    pipeline = (given.get("--pipeline") or ["training"])[-1]
    for value in given.get("--set", []):
        problems += check_set(value)
    for value in given.get("--param", []):
        problems += check_param(value, PIPELINE_SECTIONS.get(pipeline, ("parameters", "batch")))
    config = (given.get("--config") or [""])[-1]
    for profile in (p for value in given.get("--profile", []) for p in value.split("|") if not is_placeholder(p)):
        if not config and complete:
            problems.append(f"--profile {profile}: a profile needs --config FILE")
        elif config and not is_placeholder(config) and (ROOT / config).is_file():
            known = {*profile_names(ROOT / config), *profiles}
            if profile not in known:
                problems.append(f"--profile {profile}: {config} has no such profile ({', '.join(sorted(known))})")
    return problems


def check_make(args: list[str], env: dict[str, str]) -> list[str]:
    """`make TARGET ...`: targets of the Makefile; ARGS checked as the options of the verb the target runs; IMAGES
    naming images."""
    targets, verbs = makefile()
    variables, named = dict(env), []
    for arg in args:
        if ASSIGNMENT.match(arg):
            variables[arg.split("=", 1)[0]] = arg.split("=", 1)[1]
        elif not arg.startswith("-"):
            named.append(arg)
    problems = [f"make {t}: no such target in the Makefile" for t in named if t not in targets]
    for target in (t for t in named if t in verbs and "ARGS" in variables):
        arguments = [w for words in shell_commands(variables["ARGS"]) for w in words]
        problems += check_click(cli, "python -m pipelines", [verbs[target], *arguments], False, set())
    images = sorted(set(image_names().values()))
    return problems + [
        f"IMAGES={name}: no such image ({', '.join(images)})"
        for name in variables.get("IMAGES", "").split()
        if name not in images
    ]


def check_module(module: str, args: list[str], complete: bool, profiles: set[str]) -> list[str]:
    """`python -m MODULE ...`: the CLIs' commands and options; a repository module exists and takes the options
    its argparse parser declares (in the module or a repository module it imports); another module is installed."""
    if module in CLIS:
        return check_click(CLIS[module], f"python -m {module}", args, complete, profiles)
    if module.split(".")[0] not in repository_packages():
        return [] if importlib.util.find_spec(module.split(".")[0]) else [f"python -m {module}: no such module"]
    path = module_file(module, main=True)
    if path is None:
        return [f"python -m {module}: no such module in the repository"]
    known = argparse_options(path).union(
        *(argparse_options(module_file(name)) for name in imported_modules(path) if module_file(name)),
        {"-h", "--help"},
    )
    if module == TRAINER_MODULE:
        known |= trainer_hyperparameter_flags(args)
    flags = (a.split("=")[0] for a in args if a.startswith("-") and not NUMBER.fullmatch(a))
    return [
        f"python -m {module}: no option {flag}"
        for flag in flags
        if len(known) > 2 and flag not in known and not is_placeholder(flag)
    ]


def trainer_hyperparameter_flags(args: list[str]) -> set[str]:
    """The trainer's flags of the hyperparameters it declares (trainer/hyperparameters.py): its own and those of
    the `--model` builder (a doc's example builders included: `doc_builders`)."""
    doc_builders()
    model = next((b for a, b in zip(args, args[1:]) if a == "--model"), DEFAULT_BUILDER)
    declaration = declared(DEFAULT_BUILDER if is_placeholder(model) else model)
    return {flag(name) for name in (*declaration.training, *declaration.builder)}


@cache
def doc_builders() -> str:
    """The docs' example builders, python blocks opening with `# models/NAME.py`, written to a folder added to the
    `models` package's path, so that the checks read them as a user's: `--model models.NAME:build` flags and config
    snippets naming them are checked against the hyperparameters they declare. Returns the folder."""
    import models

    folder = tempfile.mkdtemp(prefix="doc-builders-")
    for name in DOCS:
        for block in (b for b in load_doc(name).blocks if b.language == "python"):
            found = re.fullmatch(r"#\s*models/(\w+)\.py", block.lines[0][1].strip()) if block.lines else None
            if found:
                (Path(folder) / f"{found[1]}.py").write_text(block.text + "\n")
    models.__path__.append(folder)
    return folder


def check_python(code: str) -> list[tuple[int, str]]:
    """Python code: it parses; what it imports from this repository exists; an attribute of an instance of a class
    it imported from here is a member of that class. Problems with their line in the code."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return [(e.lineno or 1, f"not valid Python: {e.msg}")]
    problems: list[tuple[int, str]] = []
    classes: dict[str, ast.ClassDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            problems += [
                (node.lineno, f"import {a.name}: no such module")
                for a in node.names
                if a.name.split(".")[0] in repository_packages() and module_file(a.name) is None
            ]
        if (
            not isinstance(node, ast.ImportFrom)
            or not node.module
            or node.module.split(".")[0] not in repository_packages()
        ):
            continue
        path = module_file(node.module)
        if path is None:
            problems.append((node.lineno, f"from {node.module} import ...: no such module"))
            continue
        for alias in node.names:
            found = defined_names(path).get(alias.name)
            if found is None and module_file(f"{node.module}.{alias.name}") is None:
                problems.append(
                    (node.lineno, f"from {node.module} import {alias.name}: not in {path.relative_to(ROOT)}")
                )
            if isinstance(found, ast.ClassDef) and not found.bases:
                classes[alias.asname or alias.name] = found
    instances = {
        target.id: classes[node.value.func.id]
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
        if node.value.func.id in classes
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in instances:
            cls = instances[node.value.id]
            if node.attr not in class_members(cls):
                problems.append((node.lineno, f"{node.value.id}.{node.attr}: {cls.name} has no {node.attr}"))
    return problems


def check_words(words: list[str], complete: bool, profiles: set[str]) -> list[str]:
    """One shell command: `python -m ...` (any python: .venv/bin/python, python3), `python -c CODE`, `make ...`."""
    env, words = without_assignments(words)
    if words[:1] == ["make"]:
        return check_make(words[1:], env)
    if not words or not PYTHON.fullmatch(words[0]):
        return []
    args = words[1:]
    for i, arg in enumerate(args[:-1]):
        if arg == "-m":
            return check_module(args[i + 1], args[i + 2 :], complete, profiles)
        if arg == "-c":
            return [message for _, message in check_python(args[i + 1])]
        if not arg.startswith("-"):
            break
    return []


def doc_profiles(doc: Doc) -> set[str]:
    """The profiles a doc's YAML snippets define (a doc may show a profile, then use it)."""
    found: set[str] = set()
    for block in doc.blocks:
        data = safe_yaml(block.text) if block.language == "yaml" else None
        if isinstance(data, dict) and isinstance(data.get("profiles"), dict):
            found |= set(data["profiles"])
    return found


def safe_yaml(text: str) -> typing.Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def commands(doc: Doc) -> list[str]:
    """Every command of the doc's bash blocks and inline code, and its python blocks' code."""
    profiles = doc_profiles(doc)
    problems = [doc.where(n, m, line) for n, line, words in doc.commands() for m in check_words(words, True, profiles)]
    for block in (b for b in doc.blocks if b.language == "python"):
        problems += [doc.where(block.lines[n - 1][0], m, block.lines[n - 1][1]) for n, m in check_python(block.text)]
    for span in doc.spans:
        for words in shell_commands(span.text):
            env, command = without_assignments(words)
            verb = cli.commands.get(command[0]) if command else None
            if verb is not None and len(command) > 1 and (command[1].startswith("-") or isinstance(verb, click.Group)):
                words = [*(f"{k}={v}" for k, v in env.items()), "python", "-m", "pipelines", *command]
            problems += [doc.where(span.line, m, span.text) for m in check_words(words, False, profiles)]
    return problems


# --- config snippets ---------------------------------------------------------------------------------------------


def check_config_file(path: Path) -> list[str]:
    """A config file loads with the loader, with no profile and with each of its profiles."""
    try:
        for profile in ["", *profile_names(path)]:
            load_config(path, profile=profile, environ={})
    except ConfigError as e:
        return [str(e)]
    return []


def config(doc: Doc) -> list[str]:
    """The doc's config snippets: YAML blocks with config sections load; inline `--set` / `--param` fragments,
    `platform.FIELD[: VALUE]` and `TFPIPE_SECTION__FIELD[=VALUE]` name real fields and take their values."""
    doc_builders()
    problems = []
    for block in (b for b in doc.blocks if b.language == "yaml"):
        try:
            data = yaml.safe_load(block.text)
        except yaml.YAMLError as e:
            problems.append(doc.where(block.first, f"not valid YAML: {e}", block.lines[0][1]))
            continue
        if isinstance(data, dict) and CONFIG_KEYS & set(data):
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "config.yaml"
                path.write_text(block.text)
                found = [m.replace(str(path), "the snippet") for m in check_config_file(path)]
            problems += [doc.where(block.first, m, block.lines[0][1]) for m in found]
    for span in doc.spans:
        found: list[str] = []
        words = [w for command in shell_commands(span.text) for w in command]
        if words[:1] in (["--set"], ["--param"]):
            for option, value in zip(words, words[1:]):
                found += check_set(value) if option == "--set" else []
                found += check_param(value, ("parameters", "batch")) if option == "--param" else []
        field = re.fullmatch(r"((?:platform|study)(?:\.[\w-]+)+)(?::\s*(.+))?", span.text)
        if field and not config_field(tuple(field.group(1).split("."))):
            found.append(f"{field.group(1)}: no such config field")
        elif field and field.group(2):
            found += check_set(f"{field.group(1)}={field.group(2)}")
        if len(words) == 1 and re.match(r"TFPIPE_[A-Z]+__\w", words[0]):
            name, _, value = words[0].partition("=")
            overrides = env_overrides({name: value})
            found += [f"{name}: not a config section"] if not overrides else []
            found += [m for o in overrides for m in check_set(f"{'.'.join(o.path)}={value or '...'}")]
        problems += [doc.where(span.line, m, span.text) for m in found]
    return problems


# --- paths and links ---------------------------------------------------------------------------------------------


def check_path(text: str, here: Doc) -> list[str]:
    """A repository path (`containers/serving.Dockerfile`, `docs/x.md#anchor`, `containers/*.in`) exists, with its
    anchor; one under build/ is a file cloudbuild.yaml writes (the docs name its outputs); placeholders skipped."""
    file, _, anchor = re.sub(r"(::|:\d).*$", "", text).rstrip(".:").partition("#")
    if file.startswith("build/"):
        pattern = re.sub(r"<[^>]*>", "*", file)
        if any(fnmatch.fnmatch(out, pattern) for out in build_outputs()):
            return []
        return [f"{file}: not a file cloudbuild.yaml writes ({', '.join(sorted(build_outputs()))})"]
    if re.search(r"[<>${}]|\.\.\.", file) or any(re.fullmatch(r"[A-Z][A-Z0-9_]*", part) for part in file.split("/")):
        return []
    if not (list(ROOT.glob(file)) if "*" in file else (ROOT / file).exists()):
        return [f"{file}: no such file or folder in the repository"]
    if anchor and file.endswith(".md") and anchor not in anchors(here if file == here.name else load_doc(file)):
        return [f"{file}#{anchor}: no such heading in {file}"]
    return []


def code_paths(doc: Doc) -> list[tuple[int, str, str]]:
    """The repository paths a doc's code names: line, path, snippet. In bash the commands' words, in python the
    string literals, in YAML the scalars (comments are prose), and every inline code span."""
    found = [(span.line, span.text, span.text) for span in doc.spans]
    found += [(n, word, line) for n, line, words in doc.commands() for word in words]
    for block in doc.blocks:
        if block.language == "python":
            try:
                tree = ast.parse(block.text)
            except SyntaxError:
                continue  # commands() reports it
            found += [
                (block.lines[node.lineno - 1][0], node.value, block.lines[node.lineno - 1][1])
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
            ]
        elif block.language == "yaml":
            found += [(block.line_of(s), s, s) for s in scalars(safe_yaml(block.text))]
    pattern = path_pattern()
    return [(n, m.group(0), snippet) for n, text, snippet in found for m in pattern.finditer(text)]


def scalars(data: typing.Any) -> list[str]:
    if isinstance(data, dict):
        return [s for key, value in data.items() for s in [str(key), *scalars(value)]]
    if isinstance(data, list):
        return [s for value in data for s in scalars(value)]
    return [data] if isinstance(data, str) else []


def paths(doc: Doc) -> list[str]:
    """Every repository path the doc's code names."""
    return [doc.where(n, m, snippet) for n, path, snippet in code_paths(doc) for m in check_path(path, doc)]


def links(doc: Doc) -> list[str]:
    """Every relative markdown link reaches a file, and its #anchor a heading of that page."""
    problems = []
    for m in LINK.finditer(doc.prose):
        target = m.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        line = doc.prose.count("\n", 0, m.start()) + 1
        file, _, anchor = target.partition("#")
        path = ((ROOT / doc.name).parent / file).resolve()
        if file and not path.exists():
            problems.append(doc.where(line, f"link to {file}: no such file", m.group(0)))
        elif anchor and (not file or path.suffix == ".md"):
            page = load_doc(str(path.relative_to(ROOT))) if file else doc
            if anchor not in anchors(page):
                problems.append(doc.where(line, f"link to {target}: no such heading in {page.name}", m.group(0)))
    return problems


# --- names shared by tfpipe.yaml, cloudbuild.yaml and the docs ------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A value a file states (a repository name, a region, ...), where it states it."""

    where: str
    value: str


def disagreements(what: str, claims: list[Claim]) -> list[str]:
    """Nothing when every claim states the same value; otherwise each claim, where it is made."""
    if len({c.value for c in claims}) <= 1:
        return []
    return [f"{what} differ: {' vs '.join(sorted({c.value for c in claims}))}"] + [
        f"  {c.value} at {c.where}" for c in claims
    ]


def platform_default(field: str) -> tuple[str, str]:
    """Where pipelines/config/platform.py gives a Platform field its default (FILE:LINE), and the default."""
    path = "pipelines/config/platform.py"
    return f"{path}:{line_in(path, f'    {field}: ')}", Platform.model_fields[field].default


def substitution(name: str) -> Claim:
    return Claim(f"cloudbuild.yaml:{line_in('cloudbuild.yaml', name + ':')} ({name})", cloudbuild()[0][name])


def registry_claims(kind: str) -> tuple[list[Claim], list[Claim]]:
    """The Artifact Registry repository of `kind` (kfp: templates, docker: images), named and located: cloudbuild's
    defaults, tfpipe.yaml's template_registry or image URIs, the docs' `gcloud artifacts repositories create` lines
    (names and regions) and the registry URLs in the docs' code (names). Platform's default image URIs name the
    Docker repository too."""
    names = [substitution("_KFP_REPOSITORY" if kind == "kfp" else "_REPOSITORY")]
    regions = [substitution("_REGION")]
    url = KFP_URL if kind == "kfp" else DOCKER_URI
    field = "template_registry" if kind == "kfp" else "_image"
    for n, line in enumerate((ROOT / "tfpipe.yaml").read_text().splitlines(), 1):
        match = url.search(line)
        if match and field in line.split(":")[0]:
            names.append(Claim(f"tfpipe.yaml:{n}: {line.strip()}", match.group(2 if kind == "kfp" else 3)))
            regions.append(Claim(f"tfpipe.yaml:{n}: {line.strip()}", match.group(1)))
    if kind == "docker":
        names += [Claim(platform_default(f)[0], platform_default(f)[1].split("/")[2]) for f in image_names()]
    for doc in map(load_doc, DOCS):
        for n, line, words in doc.commands():
            if words[:4] == ["gcloud", "artifacts", "repositories", "create"] and len(words) > 4:
                if option_value(words, "--repository-format") == kind:
                    names.append(Claim(f"{doc.name}:{n}: {line}", words[4]))
                    location = option_value(words, "--location") or ""
                    regions += [Claim(f"{doc.name}:{n}: {line}", location)] if not is_placeholder(location) else []
        code = [(s.line, s.text) for s in doc.spans] + [line for b in doc.blocks for line in b.lines]
        for n, text in code:
            for match in url.finditer(text):
                name = match.group(2 if kind == "kfp" else 3)
                if not is_placeholder(name) and (kind == "kfp" or match.group(2) != "vertex-ai"):
                    names.append(Claim(f"{doc.name}:{n}: {text.strip()}", name))
    return names, regions


def image_problems() -> list[str]:
    """The images (trainer, components, serving, trainer-gpu, serving-gpu) are named alike everywhere: Platform's
    `<name>_image` fields; cloudbuild's builds (tag, containers/<name>.Dockerfile, the GPU ones the CPU one's) and
    compile step (`--set platform.<name>_image=$(cat build/<name>.image)`); the image fields of tfpipe.yaml, of the
    docs' YAML and of Platform's defaults; the docs' `${_REPOSITORY}/{...}` lists."""
    expected = image_names()
    problems = []
    built = set()
    for step in cloudbuild()[1]:
        args = [str(a) for a in step.get("args", [])]
        if args[:1] == ["build"]:
            image = (option_value(args, "-t") or "").rsplit("/", 1)[-1].split(":")[0]
            dockerfile = f"containers/{image.removesuffix('-gpu')}.Dockerfile"
            built.add(image)
            if option_value(args, "-f") != dockerfile or not (ROOT / dockerfile).is_file():
                problems.append(f"cloudbuild.yaml: step {step['id']} builds {image} from {option_value(args, '-f')}")
    if built != set(expected.values()):
        problems.append(f"cloudbuild.yaml builds {sorted(built)}; Platform's image fields: {sorted(expected.values())}")
    for words in cloudbuild_commands():
        for value in (words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"):
            pinned = re.fullmatch(r"platform\.(\w+_image)=\$\(cat build/([\w-]+)\.image\)", value)
            if pinned and expected.get(pinned.group(1)) != pinned.group(2):
                problems.append(f"cloudbuild.yaml: --set {value}: {pinned.group(1)} is {expected.get(pinned.group(1))}")
    fields = [("tfpipe.yaml", n, line) for n, line in enumerate((ROOT / "tfpipe.yaml").read_text().splitlines(), 1)]
    fields += [
        (doc.name, n, line)
        for doc in map(load_doc, DOCS)
        for b in doc.blocks
        if b.language == "yaml"
        for n, line in b.lines
    ]
    fields += [(*platform_default(f)[0].split(":"), f"{f}: {platform_default(f)[1]}") for f in expected]
    for file, n, line in fields:
        match = IMAGE_FIELD.match(line)
        if match and match.group(1) in expected and "/vertex-ai/" not in match.group(2):
            image = re.split(r"[:@]", match.group(2).rsplit("/", 1)[-1])[0]
            if image != expected[match.group(1)]:
                problems.append(
                    f"{file}:{n}: {match.group(1)} names the image {image}, not {expected[match.group(1)]}: {line.strip()}"
                )
    for doc in map(load_doc, DOCS):
        for span in doc.spans:
            for listed in re.findall(r"\$\{_REPOSITORY\}/\{([^}]*)\}", span.text):
                if set(listed.split(",")) != set(expected.values()):
                    problems.append(f"{doc.name}:{span.line}: images {{{listed}}}, not {sorted(expected.values())}")
    return problems


def schedule_problems() -> list[str]:
    """A cron cloudbuild.yaml passes to `schedule` (`--cron`, substitutions resolved; empty: none passed, the
    profile's) is the one its _CONFIG's _PROFILE schedules."""
    subs = cloudbuild()[0]
    text = (ROOT / "cloudbuild.yaml").read_text()
    profile = load_config(ROOT / subs["_CONFIG"], profile=subs["_PROFILE"], environ={}).platform.schedule.cron
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        for words in shell_commands(line.replace("(", " ").replace(")", " ")):
            cron = re.sub(r"\$\{(_\w+)\}", lambda m: subs[m.group(1)], option_value(words, "--cron") or "")
            if cron and cron != profile:
                problems.append(
                    f"cloudbuild.yaml:{n}: schedule --cron {cron!r}, but {subs['_CONFIG']}'s profile {subs['_PROFILE']} "
                    f"schedules {profile!r} ({subs['_CONFIG']}:{line_in(subs['_CONFIG'], 'cron:')})\n    {line.strip()}"
                )
    return problems


def substitution_table_problems() -> list[str]:
    """The docs' tables of cloudbuild substitutions (`| \\`_NAME\\` | \\`default\\` | ... |`) give every
    substitution, with cloudbuild.yaml's default."""
    subs = cloudbuild()[0]
    problems = []
    for name in DOCS:
        rows = {}
        for n, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            row = re.match(r"\|\s*`(_[A-Z_]+)`\s*\|\s*`([^`]*)`\s*\|", line)
            if row:
                rows[row.group(1)] = default = row.group(2).strip("\"'")
                if subs.get(row.group(1)) != default:
                    problems.append(
                        f"{name}:{n}: {row.group(1)} defaults to {subs.get(row.group(1))!r} in cloudbuild.yaml: {line}"
                    )
        problems += [f"{name}: the substitutions table lacks {s}" for s in subs if rows and s not in rows]
    return problems
