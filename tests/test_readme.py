"""The README is a learner's first screen, and what it shows works.

* its Python example runs as written (copied out of README.md, run in a fresh process in an empty folder) and
  prints what its comments promise: farm places for the farm [MASK], a higher P(IsNext) for the same topic, and
  attention maps whose rows are distributions;
* it stays short (<= 150 lines) with the two set-up commands, the first ten minutes and the example on its first
  screen, and its second command is the one CI runs;
* every file it or docs/ links to exists, and user documentation names features, not tracker numbers.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FARM_PLACES = {"barn", "field", "stable"}


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def python_example() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)
    assert len(blocks) == 1, "the README has one Python example"
    return blocks[0]


@pytest.mark.long  # a fresh interpreter trains 300 steps
def test_the_python_example_runs_as_written(tmp_path):
    code = python_example()
    assert len(code.strip().splitlines()) <= 14
    # Run it as a reader would (a fresh interpreter in an empty folder), then read what it printed; the check
    # itself recomputes nothing. The repository is on the path as if `pip install -e .` had been run.
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=540, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert list(tmp_path.iterdir()) == [tmp_path / "example.py"], "the example writes no files"
    lines = out.stdout.splitlines()
    top3 = ast.literal_eval(lines[0])
    assert len(top3) == 3 and FARM_PLACES & {w for w, _ in top3}, top3
    assert all(0 < p <= 1 for _, p in top3) and [p for _, p in top3] == sorted((p for _, p in top3), reverse=True)
    same_topic, other_topic = map(float, lines[1].split())
    assert 0.5 < same_topic <= 1 and 0 <= other_topic < 0.5, (same_topic, other_topic)
    tokens, shape = lines[2].rsplit(" (", 1)
    tokens = ast.literal_eval(tokens)
    assert tokens == ["[CLS]", "the", "cows", "graze", "near", "the", "barn", ".", "[SEP]"]
    assert shape == f"2, 4, {len(tokens)}, {len(tokens)})"
    rows = np.array([[float(x) for x in re.findall(r"\d\.\d+|\d\.|\d", ln)] for ln in lines[3:]])
    assert rows.shape == (len(tokens), len(tokens))
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=0.06)  # printed to 2 decimals


# The README's test command (.ci/run runs exactly it): the tests without a browser in two xdist workers, then the
# browser tests in two workers too (each worker has its own chromium and servers; no test asserts a speed)
TEST_COMMAND = ('bash scripts/install-test-tools.sh && python -m pytest -n 2 -m "not browser" '
                '&& python -m pytest -n 2 -m browser')


def test_short_with_the_essentials_on_the_first_screen():
    lines = _lines()
    assert len(lines) <= 150
    first = "\n".join(lines[:42])
    assert "pip install -r requirements.txt && streamlit run app.py" in first
    assert TEST_COMMAND in first
    assert "## Your first ten minutes" in first
    start = lines.index("```python")
    assert start < 42 and "```" in lines[start + 1:42], "the example ends on the first screen"
    assert "![" in "\n".join(lines[:8]), "a screenshot near the top"


def test_the_test_command_is_the_one_ci_runs():
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if ln.strip() and not ln.startswith("#")]
    assert ci[-1] == TEST_COMMAND
    assert any(ln.startswith(ci[-1] + " ") or ln == ci[-1] for ln in _lines())


def _user_docs() -> list[Path]:
    return [README] + sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "CONTRACT.md")


def test_every_link_resolves():
    missing = []
    for doc in _user_docs():
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path = (doc.parent / target).resolve()
            if not path.exists():
                missing.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not missing, missing


def test_every_doc_is_linked_from_the_readme():
    text = README.read_text(encoding="utf-8")
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if f"(docs/{p.name})" not in text]
    assert not unlinked, unlinked


def test_no_tracker_numbers_in_user_documentation():
    bad = []
    for doc in _user_docs():
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bissues?\s*#?\d+|(?<![\w/])#\d+\b", line, re.I):
                bad.append(f"{doc.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not bad, bad
