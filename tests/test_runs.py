"""Runs are kept (issue 10): run directories, workspaces and their limits, damaged runs, and the app's workspace
(AppTest: a link with ?ws= sees its runs and active model; a session without it sees neither)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.errors import ConfigError, InputError
from bertcore.io.checkpoint import load_checkpoint
from bertcore.training import runs
from bertcore.training.run_corpus import load_run_corpus
from bertcore.launch import service

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


def tiny_spec(name="run", steps=4, corpus="tutorial"):
    bert = BertConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1,
                      max_position_embeddings=32)
    tc = TrainConfig(steps=steps, batch_size=4, eval_every=2, eval_size=4, snapshot_every=2, max_seq_len=16,
                     warmup_steps=1)
    return service.RunSpec(bert, tc, corpus=corpus, name=name)


# ------------------------------------------------------------------ places and ids
def test_runs_root_from_env_xdg_and_home(monkeypatch, tmp_path, _runs_dir_in_tmp):
    assert runs.runs_root() == _runs_dir_in_tmp.resolve()
    monkeypatch.delenv("BERTCORE_RUNS_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert runs.runs_root() == (tmp_path / "xdg" / "bertcore" / "runs").resolve()
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert runs.runs_root() == (tmp_path / "home" / ".local" / "share" / "bertcore" / "runs").resolve()


@pytest.mark.parametrize("ws", ["..", "../../etc", "/etc/passwd", "a" * 15, "a" * 65, "abc/defghijklmnopq",
                                "abcdefghijklmnop/..", "abcdefghijklmnop\x00", "ábcdefghijklmnopq", "", None, 42,
                                "abcdefghijklmnop\n", "..abcdefghijklmnop/../x"])
def test_workspace_ids_cannot_escape_the_runs_root(ws):
    assert not runs.valid_workspace_id(ws)
    with pytest.raises(InputError, match="workspace id is not valid"):
        runs.workspace_dir(ws)
    assert not runs.runs_root().exists()  # nothing was created anywhere


def test_new_workspace_ids_are_unguessable_and_stay_inside():
    ids = {runs.new_workspace_id() for _ in range(200)}
    assert len(ids) == 200 and all(runs.valid_workspace_id(i) and len(i) == 22 for i in ids)
    d = runs.workspace_dir(next(iter(ids)))
    assert d.is_dir() and d.parent == runs.runs_root() / "workspaces"


def test_run_ids_and_deletes_stay_inside(tmp_path):
    ws = runs.workspace_dir(runs.new_workspace_id())
    for bad in ("..", "../x", "/etc", "a/b", ".hidden", ""):
        assert runs.find_run(ws, bad) is None
    outside = tmp_path / "precious"
    outside.mkdir()
    with pytest.raises(InputError, match="outside the runs folder"):
        runs.delete_run(outside)
    with pytest.raises(InputError):
        runs.delete_run(runs.runs_root())
    assert outside.is_dir()


# ------------------------------------------------------------------ the run directory
def test_run_directory_layout_and_management(tmp_path):
    ws = runs.workspace_dir(runs.new_workspace_id())
    r = service.train(tiny_spec("first run"), parent=ws)
    d = r.run_dir
    assert d.parent == ws and runs.RUN_ID_RE.match(d.name)
    for f in ("config.json", "train_config.json", "vocab.txt", "model.safetensors", "history.csv",
              "snapshots.safetensors", "bundle.json", "run.json", "resume.safetensors"):
        assert (d / f).is_file(), f
    meta = json.loads((d / "run.json").read_text())
    assert {k: meta[k] for k in ("name", "status", "steps_done", "total_steps", "seed", "corpus", "corpus_spec")} == {
        "name": "first run", "status": "finished", "steps_done": 4, "total_steps": 4, "seed": 0,
        "corpus": "tutorial", "corpus_spec": "tutorial"}
    h = load_checkpoint(d).history
    last = h.dropna(subset=["eval_mlm_acc"]).iloc[-1]
    assert meta["metrics"]["eval_mlm_acc"] == pytest.approx(last.eval_mlm_acc)
    assert meta["metrics"]["eval_nsp_loss"] == pytest.approx(last.eval_nsp_loss)
    (info,) = runs.list_runs(ws)
    assert info.summary().startswith("finished, 4/4 steps · held-out MLM acc")
    runs.rename_run(d, "  renamed   run ")
    assert runs.list_runs(ws)[0].name == "renamed run"
    with pytest.raises(InputError, match="empty"):
        runs.rename_run(d, "   ")
    import io
    import zipfile

    names = set(zipfile.ZipFile(io.BytesIO(runs.zip_run(d))).namelist())
    assert {"config.json", "model.safetensors", "run.json", "history.csv"} <= names
    runs.delete_run(d)
    assert runs.list_runs(ws) == []


def test_damaged_runs_are_listed_with_a_reason_and_can_be_deleted():
    ws = runs.workspace_dir(runs.new_workspace_id())
    good = service.train(tiny_spec("good"), parent=ws).run_dir
    cases = {"no-run-json": None, "garbage": b"{not json", "a-list": b"[1, 2]", "bad-status": b'{"status": "zzz"}',
             "bad-steps": b'{"status": "finished", "steps_done": "many"}', "half-written": None}
    for name, content in cases.items():
        d = ws / name
        d.mkdir()
        if content is not None:
            (d / "run.json").write_bytes(content)
    half = ws / "half-written"
    (half / "run.json").write_text(json.dumps({"status": "finished", "steps_done": 3, "total_steps": 9}))
    listed = {r.id: r for r in runs.list_runs(ws)}
    assert set(listed) == set(cases) | {good.name}
    assert listed[good.name].damaged is None
    reasons = {k: listed[k].summary() for k in cases}
    assert all(v.startswith("damaged: ") for v in reasons.values()), reasons
    assert "no run.json" in reasons["no-run-json"] and "model.safetensors missing" in reasons["half-written"]
    assert "unknown status" in reasons["bad-status"] and "bad field" in reasons["bad-steps"]
    for k in cases:
        runs.delete_run(listed[k].path)
    assert [r.id for r in runs.list_runs(ws)] == [good.name]


def test_running_run_of_a_dead_process_reads_as_stopped():
    ws = runs.workspace_dir(runs.new_workspace_id())
    d = service.train(tiny_spec("cut"), parent=ws).run_dir
    runs.update_run_json(d, status="running", steps_done=2, pid=2**22 + 12345)  # no such process
    info = runs.read_run(d)
    assert info.status == "stopped" and "interrupted at step 2" in info.reason and info.resumable
    runs.update_run_json(d, pid=os.getpid())  # this process, but not training it
    assert runs.read_run(d).status == "stopped"


def test_workspace_caps_name_what_to_delete(monkeypatch):
    ws = runs.workspace_dir(runs.new_workspace_id())
    monkeypatch.setenv("BERTCORE_MAX_RUNS_PER_WORKSPACE", "2")
    runs.check_capacity(ws, new_runs=2)
    service.train(tiny_spec("alpha"), parent=ws)
    service.train(tiny_spec("beta"), parent=ws)
    with pytest.raises(runs.RunLimitError) as e:
        runs.check_capacity(ws)
    msg = str(e.value)
    assert "at most 2 runs" in msg and "BERTCORE_MAX_RUNS_PER_WORKSPACE" in msg and "“alpha”" in msg
    assert "delete" in msg and len(runs.list_runs(ws)) == 2  # nothing deleted
    monkeypatch.setenv("BERTCORE_MAX_RUNS_PER_WORKSPACE", "20")
    monkeypatch.setenv("BERTCORE_MAX_WORKSPACE_MB", "0.01")
    with pytest.raises(runs.RunLimitError, match="BERTCORE_MAX_WORKSPACE_MB"):
        runs.check_capacity(ws)
    monkeypatch.setenv("BERTCORE_MAX_WORKSPACE_MB", "garbage")
    with pytest.raises(ConfigError, match="BERTCORE_MAX_WORKSPACE_MB='garbage' is not a number; set it to"):
        runs.max_workspace_mb()


def test_uploaded_corpus_is_stored_for_resume():
    corpus = builtin_corpus(seed=5, n_pairs=40)
    r = service.train(tiny_spec("c", corpus=corpus), parent=runs.cli_runs_dir())
    meta = runs.read_run_json(r.run_dir)
    assert meta["corpus_spec"] == "run:corpus.tsv"
    rebuilt = load_run_corpus(meta["corpus_spec"], r.run_dir, meta["corpus"])
    assert rebuilt.pairs == corpus.pairs


# ------------------------------------------------------------------ the app's workspace (AppTest)
def _sidebar_text(at) -> str:
    return " ".join(m.value for m in at.sidebar.markdown) + " " + " ".join(
        str(sb.options) for sb in at.sidebar.selectbox)


def _ws(at) -> str:
    v = at.query_params["ws"]
    return v[0] if isinstance(v, list) else v


def test_a_link_with_ws_finds_runs_and_active_model_and_others_do_not():
    from streamlit.testing.v1 import AppTest

    ws = runs.new_workspace_id()
    d = service.train(tiny_spec("my kept run"), parent=runs.workspace_dir(ws)).run_dir
    runs.write_workspace(ws, active=f"run:{d.name}")

    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["ws"] = ws
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.sidebar.markdown[0].value == "**Active model:** my kept run"
    assert "my kept run" in _sidebar_text(at)
    assert _ws(at) == ws
    at.switch_page("app_pages/train.py").run()  # the history chart is back (from the run's history.csv)
    assert not at.exception
    panel = [json.loads(e.proto.json_args) for e in at.get("component_instance")
             if "livechart" in e.proto.component_name]
    saved = runs.read_run(d)
    assert len(panel) == 1 and len(panel[0]["train"]) == saved.steps_done > 0  # the run's history.csv, every step
    assert _ws(at) == ws  # kept across a page switch

    other = AppTest.from_file(APP, default_timeout=60).run()  # another browser: no link
    assert not other.exception
    assert "fresh untrained" in other.sidebar.markdown[0].value
    assert "my kept run" not in _sidebar_text(other)
    assert _ws(other) != ws and runs.valid_workspace_id(_ws(other))


def test_a_bad_ws_param_starts_a_new_workspace_and_writes_nothing_outside():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["ws"] = "../../../tmp/evil"
    at.run()
    assert not at.exception
    assert any("not valid" in w.value for w in at.sidebar.warning)
    assert runs.valid_workspace_id(_ws(at))
    root = runs.runs_root()
    assert not root.exists() or all(root in p.resolve().parents for p in root.rglob("*"))
