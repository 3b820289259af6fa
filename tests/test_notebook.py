"""examples/quickstart.ipynb runs top to bottom, offline, and shows what its headings promise.

The notebook is executed with nbclient in a real kernel, from examples/ as Jupyter would, with a shorter run
(its ``parameters`` cell, papermill's convention, is followed by ``steps = 120``); runs go to a temp folder
through BERTCORE_RUNS_DIR. The committed file carries no outputs.
"""
from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from explorer.figures.bertviz_offline import has_cdn_reference

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
STEPS = 120


def _read():
    return nbformat.read(NOTEBOOK, as_version=4)


def test_committed_notebook_has_no_outputs():
    nb = _read()
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has code"
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert [c for c in code if "parameters" in c.metadata.get("tags", [])], "a parameters cell (steps)"


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _html(cell) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs if "data" in o)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    nb = _read()
    i = next(k for k, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(i + 1, nbformat.v4.new_code_cell(f"steps = {STEPS}  # injected by tests/test_notebook.py"))
    mp = pytest.MonkeyPatch()
    mp.setenv("BERTCORE_RUNS_DIR", str(runs))  # the kernel inherits the environment
    # ... and importing streamlit (any test module that does, before this one) sets MPLBACKEND=Agg, which would
    # keep the kernel from its inline backend: plt.show() would draw nothing. Jupyter starts a kernel without it.
    mp.delenv("MPLBACKEND", raising=False)
    try:
        # iopub_timeout: how long nbclient waits for a cell's outputs after the cell finished (default 4 s, after
        # which it would drop them silently on a slow machine)
        NotebookClient(nb, timeout=420, kernel_name="python3", iopub_timeout=120, raise_on_iopub_timeout=True,
                       resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        mp.undo()
    return nb, runs


def _cell(nb, needle: str):
    return next(c for c in nb.cells if c.cell_type == "code" and needle in c.source)


def test_trains_into_a_run_directory(executed):
    nb, runs = executed
    out = _text(_cell(nb, "result = train("))
    m = re.search(rf"finished after {STEPS} steps, saved in (\S+)", out)
    assert m, out
    run_dir = Path(m.group(1))
    assert run_dir.is_relative_to(runs) and (run_dir / "model.safetensors").is_file()
    acc = float(re.search(r"held-out MLM accuracy ([\d.]+)", out).group(1))
    base = float(re.search(r"unigram baseline ([\d.]+)", out).group(1))
    assert acc > base > 0  # 120 steps already beat always-the-most-frequent-word


def test_fill_mask_and_nsp(executed):
    nb, _ = executed
    lines = _text(_cell(nb, "fill_mask(model, tok")).splitlines()
    words = [ln.split() for ln in lines[:5]]
    probs = [float(p) for _, p in words]
    assert len(words) == 5 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
    nsp = [float(re.search(r"P\(IsNext\) = ([\d.]+)", ln).group(1)) for ln in lines[5:]]
    assert len(nsp) == 2 and all(0 <= p <= 1 for p in nsp)


def test_head_view_is_inline_and_offline(executed):
    nb, _ = executed
    cell = _cell(nb, "head_view_html(")
    first = _text(cell).splitlines()[0]
    tokens = ast.literal_eval(first.rsplit(" (", 1)[0])
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2
    frame = _html(cell)
    assert frame.startswith("<div><iframe srcdoc=")
    page = html.unescape(re.search(r'srcdoc="([^"]*)"', frame).group(1))
    assert '<select id="layer">' in page and "requirejs(['jquery', 'd3']" in page
    assert not has_cdn_reference(page)
    params, _ = json.JSONDecoder().raw_decode(page, page.index("const params = ") + len("const params = "))
    view = params["attention"][0]
    assert view["name"] == "All" and view["left_text"] == tokens
    L, H, T = len(view["attn"]), len(view["attn"][0]), len(tokens)
    assert (L, H) == (2, 4) and all(abs(sum(row) - 1) < 1e-3 for layer in view["attn"] for head in layer
                                    for row in head) and len(view["attn"][0][0]) == T
    assert params["attention"][1]["name"] == "Sentence A -> Sentence A"  # sentence_b_start was given


def test_skills_chart_and_table(executed):
    nb, _ = executed
    cell = _cell(nb, "skills.csv")
    assert any("image/png" in o.get("data", {}) for o in cell.outputs), \
        f"the chart is drawn: {[(o.get('output_type'), list(o.get('data', {})), str(o.get('text', ''))[:300]) for o in cell.outputs]}"
    table = _html(cell)
    assert "verb_agreement" in table and "seconds" in table


def test_logit_lens_table(executed):
    nb, _ = executed
    table = _html(_cell(nb, "logit_lens("))
    assert all(row in table for row in ("embeddings", "layer 1", "layer 2", "rank of 'barn'"))


def test_glass_box_stage_recomputed_by_hand(executed):
    nb, _ = executed
    cell = _cell(nb, "trace(model, tok")
    gap = float(re.search(r"max \|by hand - model\|: (\S+)", _text(cell)).group(1))
    assert gap < 1e-5  # softmax(Q Kᵀ / √d_k) from the traced Q and K equals the traced probabilities
    table = _html(cell)
    assert "[CLS]" in table and "cows" in table
