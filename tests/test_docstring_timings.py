"""The code says why, docs/BENCH.md says how fast: product docstrings cite no timings.

A timing in a docstring goes stale the day the code gets faster and no test notices; the figure, its bar and the
command that reproduces it belong in docs/BENCH.md (the dated runs in docs/BENCH-HISTORY.md), and a docstring gives
the design reason with at most a pointer to the section. Checked here:

* no module, class or function docstring of the product (bertcore/, explorer/, app_pages/, app.py, serve.py) holds
  a duration ("0.8 s", "5-50 ms", "2 minutes"), a speed-up ("3x faster") or a rate ("12 steps/s"), except a
  configuration value, said as one of the phrases in ``ALLOWED_BEFORE`` / ``ALLOWED_AFTER`` ("default 10 s",
  "every 3 s", "``MAX_WAIT`` = 10 s", "90 s by default");
* a docstring or comment that names a section of BENCH.md or BENCH-HISTORY.md in quotes names one that exists there.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_DIRS = ("bertcore", "explorer", "app_pages")
PRODUCT_FILES = ("app.py", "serve.py")

_NUM = r"\d+(?:[.,]\d+)?"
TIMING = re.compile(
    rf"(?<![\w.]){_NUM}(?:\s?[–-]\s?{_NUM})?\s?(?:ms|µs|us|s|secs?|seconds?|minutes?|min)\b(?![-/])"  # a duration
    rf"|(?<![\w.]){_NUM}\s?[×x]\s+(?:faster|slower|quicker|as fast|the speed)"                          # a speed-up
    rf"|\b(?:faster|slower|quicker)\s+by\s+{_NUM}"
    rf"|(?<![\w.]){_NUM}\s?k?\s?(?:steps|tokens|examples|samples)/s\b",                                 # a rate
    re.I)
# A configuration value, not a measured speed: the words right before the number, or right after it.
ALLOWED_BEFORE = re.compile(r"(?:\bdefault|\bby default|\bevery|\bafter|\bup to|=)\s*$", re.I)
ALLOWED_AFTER = re.compile(r"^\s*by default\b", re.I)


def product_files() -> list[Path]:
    files = [p for d in PRODUCT_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    return files + [ROOT / f for f in PRODUCT_FILES if (ROOT / f).exists()]


def docstrings(path: Path):
    """(line, text) of every module, class and function docstring of ``path``, its whitespace collapsed."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield node.body[0].lineno, " ".join(text.split())


def timings(text: str) -> list[str]:
    """The timing phrases of ``text`` that are not an allowed configuration value."""
    found = []
    for m in TIMING.finditer(text):
        if ALLOWED_BEFORE.search(text[max(0, m.start() - 24):m.start()]) or ALLOWED_AFTER.match(text[m.end():]):
            continue
        found.append(m.group(0))
    return found


@pytest.mark.parametrize("text", [
    "72 subplots took the browser ~0.8 s to draw",
    "each of those turns took 10-30 ms",
    "a Styler costs ~0.2 ms a cell",
    "one 2000x64 SVD took 1.1 s instead of 46 ms",
    "about every 15 s for 0.3-0.6 s",
    "the fused path is 3x faster than the loop",
    "it trains at 12.5 steps/s here",
    "the whole run takes 2 minutes",
])
def test_the_pattern_finds_timings(text):
    assert timings(text), text


@pytest.mark.parametrize("text", [
    "``BERTCORE_ABANDON_SECONDS`` (default 10 s) stops itself",
    "one running elsewhere every 3 s (from the disk)",
    "waits for it (up to ``MAX_WAIT`` = 10 s, a sleeping coroutine",
    "refused after ``refusal_delay`` seconds (by default 3 s, doubling",
    "its lease on it expires (NFSv4: 90 s by default)",
    "8× its width, top-k with k = 8",
    "the embeddings output + each layer: L+1 x (B, T, D)",
    "600 steps, 13 saved steps, seq 128",
])
def test_the_pattern_allows_settings_and_shapes(text):
    assert not timings(text), timings(text)


def test_product_docstrings_cite_no_timings():
    bad = []
    for path in product_files():
        for line, text in docstrings(path):
            for hit in timings(text):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {hit!r}")
    assert not bad, "timings belong in docs/BENCH.md, not in docstrings:\n" + "\n".join(bad)


def _headings(doc: Path) -> list[str]:
    return [ln.lstrip("#").strip() for ln in doc.read_text(encoding="utf-8").splitlines() if ln.startswith("#")]


def test_cited_bench_sections_exist():
    heads = {name: _headings(ROOT / "docs" / name) for name in ("BENCH.md", "BENCH-HISTORY.md")}
    cite = re.compile(r'(BENCH(?:-HISTORY)?\.md),?\s+\(?"([^"]+)"')
    missing = []
    for path in product_files():
        # comments continued over several lines read as one text
        text = " ".join(re.sub(r"\n\s*#", " ", path.read_text(encoding="utf-8")).split())
        for name, section in cite.findall(text):
            if not any(h.startswith(section.rstrip(".")) for h in heads[name]):
                missing.append(f"{path.relative_to(ROOT)}: {name}, {section!r}")
    assert not missing, missing
