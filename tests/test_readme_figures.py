"""Every measured figure of the README and of docs/results.md is in a results file that
its passage cites.

A figure is a number with a unit (``19.4 ms``, ``38.2 s``, ``5.6-6.9 s``,
``21.0 and 22.9 ms``) or an accuracy (``0.9742``).  A passage is a paragraph, a
table or a code block; one that cites no file is covered by the next one that
does (a table by the paragraph under it).  A figure is found when some number of
those files, in seconds or already in its unit, rounds to it at the precision
the README shows.  A cited file is a ``.json`` path (braces and ``*`` expanded)
or a results folder (every JSON file in it), under ``benchmarks/results/``.
"""

from __future__ import annotations

import json
import re
from itertools import product
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

NUMBER = r"\d+(?:\.\d+)?"
# one or more numbers joined by "-", " and ", " / ", ", ", then the unit
WITH_UNIT = re.compile(rf"((?:{NUMBER}(?:-| and | / |, ))*{NUMBER}) ?(ms|s)\b")
ACCURACY = re.compile(r"(?<![\d.])0\.\d{4}(?![\d.])")
CITED = re.compile(r"[\w./{},*-]+\.json|[\w.-]+-1x[\w.-]+/?")


def _expand(pattern: str) -> list[str]:
    """``a_{1,4}.json`` -> ``a_1.json``, ``a_4.json``."""
    parts = re.split(r"\{([^}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in product(*choices)]


def _cited_files(text: str) -> set[Path]:
    found: set[Path] = set()
    for cited in CITED.findall(text):
        for name in _expand(cited.removeprefix("benchmarks/results/").rstrip("/")):
            if name.endswith(".json"):
                found.update(RESULTS.glob(f"**/{name}"))
            elif (RESULTS / name).is_dir():
                found.update((RESULTS / name).glob("**/*.json"))
    return found


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def _figures(text: str) -> list[tuple[str, str]]:
    """``(number, unit)`` for every measured figure; unit "" for an accuracy."""
    out = []
    for joined, unit in WITH_UNIT.findall(text):
        out += [(n, unit) for n in re.findall(NUMBER, joined)]
    return out + [(a, "") for a in ACCURACY.findall(text)]


def _found(figure: str, unit: str, pool: list[float]) -> bool:
    decimals = len(figure.partition(".")[2])
    shown = float(figure)
    scales = {"ms": (1e3, 1.0), "s": (1.0, 1e-3), "": (1.0,)}[unit]
    return any(round(v * scale, decimals) == shown for v in pool for scale in scales)


def _results_section(text: str) -> str:
    """The README's results (from their heading to the next section)."""
    start = text.index("## Results")
    return text[start:text.index("\n## ", start + 1)]


def _pages() -> list[str]:
    """Where the measured figures are: the README's results and the results page."""
    return [_results_section((ROOT / "README.md").read_text()),
            (ROOT / "docs" / "results.md").read_text()]


def _passages(text: str) -> list[str]:
    """Paragraphs, tables and code blocks (a code block is one passage, blank lines and all)."""
    passages: list[str] = []
    for part in re.split(r"(```[^\n]*\n.*?```)", text, flags=re.DOTALL):
        if part.startswith("```"):
            passages.append(part)
        else:
            passages += [p for p in re.split(r"\n\s*\n", part) if p.strip()]
    return passages


def _covered(text: str) -> list[tuple[str, set[Path]]]:
    """Each passage with the files that cover it (its own, else the next passage's)."""
    out: list[tuple[str, set[Path]]] = []
    waiting: list[str] = []
    for passage in _passages(text):
        waiting.append(passage)
        files = _cited_files(passage)
        if files:
            out += [(p, files) for p in waiting]
            waiting = []
    return out + [(p, set()) for p in waiting]


@pytest.mark.parametrize("page", [0, 1], ids=["README", "results.md"])
def test_every_figure_is_in_a_results_file_its_passage_cites(page):
    covered = _covered(_pages()[page])
    assert len({f for _, files in covered for f in files}) >= 2, "too few results cited"
    missing = []
    for passage, files in covered:
        pool = [n for f in files for n in _numbers(json.loads(f.read_text()))]
        missing += [f"{n} {u}".strip() for n, u in _figures(passage)
                    if not _found(n, u, pool)]
    assert not missing, f"figures in no results file their passage cites: {missing}"


def test_the_check_finds_a_figure_that_is_not_there():
    """The check itself can fail: a figure nobody measured is reported."""
    pool = [0.0194, 0.9742, 38.2]
    assert _found("19.4", "ms", pool) and _found("0.9742", "", pool)
    assert _found("38.2", "s", pool)
    assert not _found("19.5", "ms", pool) and not _found("0.9743", "", pool)
    assert _figures("KNN 21.0 and 22.9 ms, 5.6-6.9 s, 1074 / 1269 ms") == [
        ("21.0", "ms"), ("22.9", "ms"), ("5.6", "s"), ("6.9", "s"), ("1074", "ms"),
        ("1269", "ms")]
    assert _expand("a_f{1,4}.json") == ["a_f1.json", "a_f4.json"]
