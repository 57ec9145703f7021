"""Benchmark figures in the docs come from the result files, bench/results/*.json.

- docs/benchmarks.md is generated from them by `python -m bench.page` (each benchmark's method note from its
  module's docstring): it must be byte for byte what the generator writes from the result files as they are.
- The other docs quote figures by hand: a sentence or table row that names `bench/results/NAME.json` quotes that
  file, and every number in it is checked; a sentence that links to benchmarks.md, or names `python -m bench.NAME`,
  and quotes a measured figure (a number with a unit: ms, s, min, ×, %, B, KB, MB, ex/s, QPS, instances/s) without
  naming a result file is a figure with nothing behind it.
- What is not a figure: numbers in code spans and fenced blocks (commands, options, file names), in link targets and
  HTML comments, and digits inside words (int8, float32, p99, x86_64, v1).
- A figure is found when a number of the file (a JSON number, or one written inside a JSON string such as a version
  or a reason) rounds to it at the figure's decimals; thousands separators are ignored, and a percentage also
  matches its fraction (77 % and 0.77).
- A result file that docs quote is a full run's: not `--quick`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import page

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks.md"

RESULT_FILE = re.compile(r"bench/results/([\w.-]+\.json)")
NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w]|\.\d)(\s?%)?")
JSON_NUMBER = re.compile(r"\d+(?:\.\d+)?")
UNIT = re.compile(
    r"(?<![\w.,])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|min|×|x\b|%|B|KB|MB|GB|ex/s|QPS|instances/s)(?![\w])",
)


def strip_non_figures(markdown: str) -> str:
    """The text without fenced code blocks, code spans, link targets and HTML comments (what holds no figure)."""
    text = re.sub(r"<!--.*?-->", " ", markdown, flags=re.S)
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", " ", text, flags=re.S | re.M)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "] ", text)
    return text


def figures(text: str) -> list[tuple[str, float, int, bool]]:
    """(as written, value, decimals, percent) of every number in `text` (already stripped)."""
    found = []
    for m in NUMBER.finditer(text):
        whole, decimals, percent = m.group(1), m.group(2) or "", bool(m.group(3))
        value = float(whole.replace(",", "") + (f".{decimals}" if decimals else ""))
        found.append((m.group(0).strip(), value, len(decimals), percent))
    return found


def numbers_of(result: object) -> list[float]:
    """Every number of a parsed JSON document: its numbers and the numbers written inside its strings."""
    out: list[float] = []

    def walk(value: object) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int | float):
            out.append(float(value))
        elif isinstance(value, str):
            out.extend(float(x) for x in JSON_NUMBER.findall(value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(result)
    return out


def matches(value: float, decimals: int, percent: bool, numbers: list[float]) -> bool:
    tolerance = 0.5 * 10**-decimals + 1e-9
    candidates = (value, value / 100) if percent else (value,)
    tolerances = (tolerance, tolerance / 100) if percent else (tolerance,)
    return any(abs(n - c) <= t for n in numbers for c, t in zip(candidates, tolerances))


def units(markdown: str) -> list[str]:
    """Sentences and table rows: a table row is one unit, prose is split after . ! ? before whitespace."""
    out = []
    for block in re.split(r"\n\s*\n", markdown):
        lines = block.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines if line.strip()):
            out.extend(lines)
        else:
            out.extend(re.split(r"(?<=[.!?])\s+(?=[A-Z(*`\[])", " ".join(lines)))
    return out


def load_results(names: set[str]) -> dict[str, object]:
    return {name: json.loads((ROOT / "bench" / "results" / name).read_text()) for name in names}


def check_text(text: str, files: set[str], where: str) -> list[str]:
    """The problems of one attributed piece of text: every figure must be in one of `files`."""
    missing = [f for f in sorted(files) if not (ROOT / "bench" / "results" / f).exists()]
    if missing:
        return [f"{where}: names bench/results/{f}, which does not exist" for f in missing]
    results = load_results(files)
    problems = [
        f"{where}: bench/results/{name} is a quick run (--quick): not a result to quote"
        for name, result in results.items()
        if isinstance(result, dict) and (result.get("provenance") or {}).get("quick")
    ]
    numbers = [n for result in results.values() for n in numbers_of(result)]
    for written, value, decimals, percent in figures(strip_non_figures(text)):
        if not matches(value, decimals, percent, numbers):
            problems.append(f"{where}: {written!r} is in none of {', '.join(sorted(files))}")
    return problems


def check_other_page(name: str, markdown: str) -> list[str]:
    problems = []
    for unit in units(markdown):
        files = set(RESULT_FILE.findall(unit))
        where = f"{name}: {' '.join(unit.split())[:90]!r}"
        if files:
            problems += check_text(unit, files, where)
        elif ("benchmarks.md" in unit or "bench." in unit) and UNIT.search(strip_non_figures(unit)):
            problems.append(f"{where}: quotes a benchmark figure without naming its bench/results/*.json")
    return problems


def test_every_figure_of_the_other_docs_is_in_its_result_file():
    pages = {p.relative_to(DOCS).as_posix(): p.read_text() for p in sorted(DOCS.rglob("*.md")) if p != BENCHMARKS}
    pages["../README.md"] = (ROOT / "README.md").read_text()
    problems = [problem for name, markdown in sorted(pages.items()) for problem in check_other_page(name, markdown)]
    assert not problems, "\n".join(problems)


def test_the_benchmarks_page_is_what_bench_page_writes():
    stale = BENCHMARKS.read_bytes() != page.render().encode()
    assert not stale, "docs/benchmarks.md is stale: run python -m bench.page"


def test_bench_page_check_names_a_stale_page(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "benchmarks.md"
    copy.write_text(page.render())
    monkeypatch.setattr(page, "PAGE", copy)
    assert page.main(["--check"]) == 0
    copy.write_text(page.render().replace("Measured at commit", "Measured at", 1))
    assert page.main(["--check"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith("benchmarks.md is stale: run python -m bench.page"), lines


@pytest.mark.parametrize(
    "result, problem",
    [
        ({"benchmark": "nothing", "provenance": {"quick": False}}, "no renderer for benchmark 'nothing'"),
        ({"benchmark": "tuning", "provenance": {"quick": True}}, "a quick run (--quick)"),
    ],
)
def test_bench_page_refuses_what_it_cannot_publish(tmp_path, result, problem):
    (tmp_path / "r.json").write_text(json.dumps(result))
    with pytest.raises(ValueError, match=re.escape(problem)):
        page.render(tmp_path)


def test_make_bench_runs_every_benchmark_then_writes_the_page():
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^bench:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert recipe, "no bench target"
    assert recipe.group(1).splitlines()[-1] == "\t$(PY) -m bench.page", "make bench does not end with bench.page"
    run = set(re.findall(r"-m bench\.(\w+)", recipe.group(1))) - {"page"}
    modules = {p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.endswith("_peer")}
    modules |= {p.parent.name for p in (ROOT / "bench").glob("*/__main__.py")}  # a benchmark that is a package
    modules -= {"__init__", "results", "page"}
    assert modules <= run, f"benchmarks make bench does not run: {sorted(modules - run)}"
    outputs = set(re.findall(r"--output bench/results/([\w.-]+\.json)", recipe.group(1)))
    written = {f"{m}.json" for m in run} | outputs
    on_disk = {p.name for p in (ROOT / "bench" / "results").glob("*.json")}
    assert on_disk <= written, f"result files make bench does not write: {sorted(on_disk - written)}"


# The checks fail where they should: pages of mistakes.

SELF_TEST_RESULT = "make_run.json"


def test_self_test_a_wrong_figure_fails():
    result = load_results({SELF_TEST_RESULT})[SELF_TEST_RESULT]
    assert isinstance(result, dict)
    wall = result["runs"][0]["wall_seconds"]
    right = f"The run took **{wall:.1f} s** (`bench/results/{SELF_TEST_RESULT}`).\n"
    assert check_other_page("pipeline.md", right) == []
    wrong = right.replace(f"{wall:.1f}", f"{wall + 0.3:.1f}")
    problems = check_other_page("pipeline.md", wrong)
    assert len(problems) == 1 and problems[0].endswith(f"'{wall + 0.3:.1f}' is in none of {SELF_TEST_RESULT}")


def test_self_test_rounding_and_thousands(tmp_path, monkeypatch):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "r.json").write_text(json.dumps({"qps": 2609.43, "ratio": 0.8494, "n": 5}))
    monkeypatch.setitem(globals(), "ROOT", tmp_path)

    def problems(text):
        return check_other_page("serving.md", f"In `bench/results/r.json`: {text}\n")

    assert problems("**2,609** QPS, 2609.4 QPS, 0.849×, 0.85×, 85 %, 5 runs") == []
    assert problems("2,610 QPS") and problems("0.848×") and problems("0.8495×") and problems("84 %")


def test_self_test_a_missing_result_file():
    problems = check_other_page("serving.md", "It took 1 s (`bench/results/nothing.json`).\n")
    assert len(problems) == 1 and problems[0].endswith("names bench/results/nothing.json, which does not exist")


def test_self_test_other_pages():
    cited = f"Small models answer faster (123456.789 ms a call; `bench/results/{SELF_TEST_RESULT}`).\n"
    problems = check_other_page("serving.md", cited)
    assert len(problems) == 1 and problems[0].endswith(f"'123456.789' is in none of {SELF_TEST_RESULT}"), problems
    uncited = "Small models answer faster (0.17 ms a call; see [Benchmarks](benchmarks.md)).\n"
    assert check_other_page("serving.md", uncited)[0].endswith("without naming its bench/results/*.json")
    code_only = "Run `python -m bench.serving --clients 1 16` (see [Benchmarks](benchmarks.md)).\n"
    assert check_other_page("serving.md", code_only) == []


def test_self_test_what_is_not_a_figure():
    text = strip_non_figures("int8 and float32 `--image-size 32` [x](a/b-1.md) p99 x86_64 <!-- 7 --> 2,609 and 0.5 %")
    assert [(w, v, d, p) for w, v, d, p in figures(text)] == [("2,609", 2609.0, 0, False), ("0.5 %", 0.5, 1, True)]
    assert matches(77, 0, True, [0.7712]) and not matches(77, 0, True, [0.7812])
    assert numbers_of({"v": "3.11.7", "ok": True, "n": [1, 2.5]}) == [3.11, 7.0, 1.0, 2.5]


def test_self_test_quick_results_are_refused(tmp_path, monkeypatch):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "q.json").write_text(json.dumps({"provenance": {"quick": True}, "x": 1.5}))
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    problems = check_other_page("serving.md", "It took 1.5 s (`bench/results/q.json`).\n")
    assert len(problems) == 1 and problems[0].endswith(
        "bench/results/q.json is a quick run (--quick): not a result to quote"
    )


def test_provenance_dirty_leaves_out_result_files(tmp_path, monkeypatch):
    """A result file rewritten by an earlier benchmark of `make bench` does not make the next one's commit dirty; a
    changed source file does."""
    import subprocess

    from bench import results

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "a.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "init", "--allow-empty")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "files")
    monkeypatch.setattr(results, "ROOT", tmp_path)
    (tmp_path / "bench" / "results" / "a.json").write_text('{"new": 1}')
    assert results.commit()["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert results.commit()["changed_paths"] == ["code.py"] and results.commit()["dirty"] is True


def test_provenance_records_the_machines_speed_at_the_start():
    """Each result file says how fast the machine ran (a Python loop and a hash, best of three), so that figures
    measured on days of different speed can be told apart."""
    from bench.results import Recorder

    provenance = Recorder("speed", {"x": 1}).provenance()
    speed = provenance["calibration"]
    assert set(speed) == {"python_loop_5m_s", "sha256_64mib_s"}
    assert all(isinstance(v, float) and 0 < v < 60 for v in speed.values())
