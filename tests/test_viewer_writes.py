"""A viewer with only a read-only link writes nothing into the owner's run (issue 56: derived data has one home).

The owner's run is a real training with saved steps and an SAE whose feature table is missing (so the Features page
must compute it). Through ``?share=`` a viewer opens every page, probes every property over the saved steps and
uploads labels CSVs on Probes; the owner's run folder is byte-for-byte and file-for-file what it was, and what the
pages computed went to the derived-data cache (``bertcore.io.derived``) instead."""
from __future__ import annotations

import ast
import hashlib
import os
from pathlib import Path

from streamlit.testing.v1 import AppTest

from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.probe_sets import PROPERTIES
from bertcore.io import derived
from bertcore.launch import service
from bertcore.training import runs
from explorer.session import share_links

APP = str(Path(__file__).resolve().parents[1] / "app.py")
OWNER = "owner-workspace-0003abc"


def _pages() -> list[str]:
    tree = ast.parse(Path(APP).read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PAGES")
    return [ast.literal_eval(row.elts[0]) for row in node.value.elts]


def _snapshot(root: Path) -> dict:
    """Every file and folder below ``root``: its bytes' sha256 (folders: None)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), root)] = None
        for n in files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def _owner_run() -> Path:
    bert = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    tc = TrainConfig(steps=20, batch_size=32, eval_every=10, eval_size=32, snapshot_every=5)
    d = service.train(service.RunSpec(bert, tc, name="owner's run"), parent=runs.workspace_dir(OWNER)).run_dir
    # an SAE on layer 0, then its feature table removed: the Features page has to compute it
    assert main(["sae", str(d), "--layer", "0", "--size", "2", "--train-steps", "20", "--quiet"]) == 0
    tables = list(d.rglob("features.json"))
    assert tables
    for t in tables:
        t.unlink()
    return d


def test_a_viewer_opens_every_page_and_uploads_without_touching_the_owners_run(_runs_dir_in_tmp):
    run = _owner_run()
    sid = share_links.create(OWNER, run.name)
    before = _snapshot(run)
    viewer = AppTest.from_file(APP, default_timeout=240)
    viewer.query_params["share"] = sid
    viewer.run()
    assert not viewer.exception, [e.value for e in viewer.exception]
    for fname in _pages():
        viewer.switch_page(f"app_pages/{fname}").run()
        assert not viewer.exception, (fname, [e.value for e in viewer.exception])
    viewer.switch_page("app_pages/probes.py").run()
    for prop in PROPERTIES:
        viewer.selectbox(key="probe_property").set_value(prop).run()
        assert not viewer.exception, prop
    for k in range(3):  # three different labels files, each probed over every saved step
        csv = "text,labels\n" + f"the cow eats hay .,D N V N P{k}\nthe cows eat hay .,D N V N P\n" * 6
        viewer.get("file_uploader")[0].set_value((f"tags{k}.csv", csv.encode(), "text/csv")).run()
        assert not viewer.exception and not viewer.error, [e.value for e in viewer.error]
    assert _snapshot(run) == before  # files and bytes: the owner's run is untouched
    cached = list(derived.root().glob("*/*"))
    assert any(p.name.startswith("probe_") for p in cached)  # the pages' numbers went to the derived cache
