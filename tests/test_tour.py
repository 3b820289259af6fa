""""Start here" on the Overview: six steps whose ticks come from what the workspace holds (a finished run, an SAE in
a run folder, the steps a page recorded in workspace.json), so they survive a reload (a new session with ?ws=)."""
from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from bertcore.config import BertConfig, TrainConfig
from bertcore.training import runs
from bertcore.launch import service
from explorer.parts import tour
from tests.apptest_pages import APP


def _spec():
    bert = BertConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1,
                      max_position_embeddings=32)
    tc = TrainConfig(steps=4, batch_size=4, eval_every=2, eval_size=4, snapshot_every=2, max_seq_len=16,
                     warmup_steps=1)
    return service.RunSpec(bert, tc, corpus="tutorial", name="tour run")


def _open(ws: str, lang: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["ws"] = ws
    if lang:
        at.query_params["lang"] = lang
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _ticks(at) -> dict:
    """step title -> ticked, read from the Overview's "Start here" list."""
    out = {}
    for m in at.markdown:
        v = m.value
        if v.startswith((tour.TICK, tour.UNTICKED)) and "**" in v:
            out[v.split("**")[1].split(". ", 1)[1]] = v.startswith(tour.TICK + " ")
    return out


def test_ticks_follow_the_workspace_and_survive_a_reload():
    ws = runs.new_workspace_id()
    at = _open(ws)
    assert at.subheader[0].value == "Start here"
    ticks = _ticks(at)
    assert list(ticks) == [s.title for s in tour.STEPS] and not any(ticks.values())
    assert "0 of 6 done" in at.caption[0].value
    # a finished pretraining run ticks step 1; a page's recorded step ticks its own
    service.train(_spec(), parent=runs.workspace_dir(ws))
    data = runs.read_workspace(ws)
    runs.write_workspace(ws, tour=["predict", "not-a-step"])
    assert runs.read_workspace(ws)["tour"] == ["predict", "not-a-step"] and data.get("tour") is None
    again = _open(ws)  # F5: a new session, the same ?ws=
    ticks = _ticks(again)
    assert ticks["Train the default model"] and ticks["Fill a mask"]
    assert sum(ticks.values()) == 2 and "2 of 6 done" in again.caption[0].value
    # another browser (no ?ws=) sees nothing ticked
    assert not any(_ticks(_open(runs.new_workspace_id())).values())


def test_a_page_records_its_step_once_and_only_for_a_trained_model(monkeypatch):
    ws = runs.new_workspace_id()
    writes = []
    real = runs.write_workspace
    monkeypatch.setattr(runs, "write_workspace", lambda w, **c: writes.append(c) or real(w, **c))
    # mark_done runs inside a page's script run: call it through a tiny script with this session's ws
    script = (f"import streamlit as st\nst.query_params['ws'] = {ws!r}\nfrom explorer.parts import tour\n"
              "class A: is_trained = {t}\ntour.mark_done('lens', A())\ntour.mark_done('lens', A())\n")
    for trained in (False, True):
        AppTest.from_string(script.replace("{t}", str(trained))).run()
    assert writes == [{"tour": ["lens"]}]  # the untrained model recorded nothing; the second call was a no-op
    assert json.loads((runs.workspace_dir(ws) / runs.WORKSPACE_FILE).read_text())["tour"] == ["lens"]
    assert _ticks(_open(ws))["See where number lives"]


def test_links_open_each_page_in_its_state_in_this_language():
    ws = runs.new_workspace_id()
    at = _open(ws, lang="zh")
    assert at.subheader[0].value == "从这里开始"
    links = [x for x in at.get("page_link") if x.proto.label == "打开"]  # "Open": the steps' links
    assert len(links) >= 4  # every step whose page exists has a link
    for link in links:
        q = link.proto.query_string
        assert f"ws={ws}" in q and "lang=zh" in q, q
    by_page = {link.proto.page.split("/")[-1].split(".")[0]: link.proto.query_string for link in links}
    assert "attn_tab=Head" in by_page["attention"] and "lp_view=lens" in by_page["lens_patching"]
