"""The Train page's objective switches (AppTest): the sentence task (NSP / SOP / none), the attention direction
(bidirectional / left-to-right) and the masking unit (token / whole word / span) are on the page with their papers,
reach the training (RunSpec -> worker child or thread -> Trainer: the run's train_config.json and config.json), and
the finished page opens on the result with the configuration collapsed, also in a new session (a reload)."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import TRAINING_END
from conftest import TRAINING_RUNS as RUNS  # stopped after each test by conftest
from streamlit.testing.v1 import AppTest

from bertcore.data.masking_units import geometric_pmf

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TRAIN = "app_pages/train.py"
K = "train_original BERT_tiny_"  # the widget keys of the default preset and size


def train_page(ws: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    if ws is not None:
        at.query_params["ws"] = ws  # a reload: a new session, only the link is left
    at.run()
    at.switch_page(TRAIN).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at) -> str:
    return " ".join(e.value for e in [*at.caption, *at.markdown, *at.info, *at.error])


def config_expander(at):
    (e,) = [e for e in at.expander if e.label.startswith(("Configuration", "Training ·"))]
    return e


def live_args(at) -> dict:
    els = [e for e in at.get("component_instance") if "livechart" in e.proto.component_name]
    assert len(els) == 1, "the Train page draws one live panel"
    return json.loads(els[0].proto.json_args)


def trace_names(args: dict, chart: str) -> list[str]:
    return [t["name"] for c in args["charts"] if c["id"] == chart for t in c["traces"]]


def ws_of(at) -> str:
    ws = at.query_params["ws"]
    return ws[0] if isinstance(ws, list) else ws


def test_the_switches_are_on_the_page_with_their_papers():
    at = train_page()
    assert at.radio(key=K + "sent").options == ["NSP", "SOP", "none"]  # as shown; the values are TrainConfig's
    assert at.radio(key=K + "attn").options == ["bidirectional", "left-to-right"]
    assert at.radio(key=K + "unit").options == ["token", "whole word", "span"]
    assert (at.radio(key=K + "sent").value, at.radio(key=K + "attn").value, at.radio(key=K + "unit").value) == (
        "nsp", "bidirectional", "token")  # BERT's own objective by default
    assert "BERT §3.2" in texts(at) and "BERT §3.1" in texts(at)
    assert config_expander(at).proto.expanded  # nothing trained yet: the form is open

    at.radio(key=K + "sent").set_value("sop").run()
    assert "ALBERT §4.6" in texts(at) and "in order, or swapped" in texts(at)
    at.radio(key=K + "sent").set_value("none").run()
    assert "RoBERTa §4.2" in texts(at) and "MLM alone" in texts(at)
    assert at.selectbox(key=K + "nsp").disabled  # no sentence head to shape
    at.radio(key=K + "sent").set_value("nsp").run()
    assert not at.selectbox(key=K + "nsp").disabled

    # whole word: the same as token with this word-level vocabulary, and the page says so
    at.radio(key=K + "unit").set_value("whole_word").run()
    assert "whole-word masking is identical to token masking" in texts(at)
    # span: SpanBERT's p and max length, with the mean length they give
    at.radio(key=K + "unit").set_value("span").run()
    assert "SpanBERT" in texts(at)
    at.number_input(key=K + "sp").set_value(0.5).run()
    at.number_input(key=K + "sl").set_value(4).run()
    mean = sum((i + 1) * q for i, q in enumerate(geometric_pmf(0.5, 4)))
    assert mean == pytest.approx(26 / 15, abs=1e-12)  # by hand: P(1..4) = 8/15, 4/15, 2/15, 1/15
    assert f"Mean span drawn: {mean:.2f} words" in texts(at)
    assert at.slider(key=K + "mr").value == pytest.approx(0.15)  # BERT's rate and 80/10/10 mix stay

    # left-to-right: a causal mask, a next-token objective, the sentence head at the last token; nothing is masked
    at.radio(key=K + "attn").set_value("left_to_right").run()
    said = texts(at)
    assert "Table 5" in said and "causal mask" in said and "next-token" in said and "last token" in said
    assert "masks nothing" in said
    labels = [s.label for s in at.slider]
    assert "mask rate (share of tokens selected)" not in labels and "→ [MASK]" not in labels
    with pytest.raises(KeyError):
        at.radio(key=K + "unit")
    assert not at.exception and not at.button(key="train_start").disabled


def _start(at, **switches) -> object:
    """Set a tiny training (20 steps of 4 pairs) and the given switches, press Start, wait for its end; the run."""
    at.slider(key=K + "steps").set_value(20)
    at.select_slider(key=K + "B").set_value(4).run()
    for key in ("attn", "sent", "unit"):  # the attention first: a left-to-right model has no masking unit
        if key in switches:
            at.radio(key=K + key).set_value(switches[key]).run()
    for key, value in switches.get("numbers", {}).items():
        at.number_input(key=K + key).set_value(value).run()
    at.button(key="train_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["bx_run"]
    RUNS.append(run)
    deadline = time.monotonic() + TRAINING_END
    while run.running and time.monotonic() < deadline:
        run.snapshot()  # the page's heartbeat
        time.sleep(0.1)
    assert run.join(TRAINING_END), "the training did not end"
    s = run.snapshot()
    assert s.status == "finished" and s.total_done == 20, (s.status, s.message, s.errors)
    return run


def _assert_result_view(at, objective_names: tuple[str, ...], sentence: str | None) -> None:
    """The page opens on the result: the configuration collapsed, the final curves named after the objective, the
    skills against 0.9, the links onward and Start one click away."""
    assert not at.exception, [e.value for e in at.exception]
    exp = config_expander(at)
    assert exp.label.startswith("Configuration of the next training") and not exp.proto.expanded
    assert any(h.value.startswith("Result: original BERT, seed 0") for h in at.subheader)
    args = live_args(at)
    assert trace_names(args, "loss") == list(objective_names)
    assert trace_names(args, "acc") == list(objective_names)
    assert args["probe_head"][2] == {"nsp": "P(IsNext)", "sop": "P(in order)", None: "no sentence head"}[sentence]
    said = texts(at)
    assert "Reached 0.9" in said or "No skill reached 0.9" in said
    links = {p.label for p in at.main.get("page_link")}
    assert links >= {"Attention", "Predict", "Inside the model"}
    if '"lab.py"' in Path(APP).read_text():  # the Lab page, once app.py registers it
        assert "Lab" in links
    assert not at.button(key="train_start").disabled  # a new training: one click


def _reloads(at, names: tuple[str, ...], sentence: str | None) -> AppTest:
    """F5 twice: soon after the end (the server still holds the finished run: explorer.launch.training_run.find_live)
    and after the server forgot it (a restart, or LIVE_KEEP_SECONDS later): only the run on disk is left. Both
    open on the result; the second is the one it returns."""
    from explorer.launch import training_run

    ws = ws_of(at)
    _assert_result_view(train_page(ws), names, sentence)
    training_run.register_live(ws, "bx_run", None)
    again = train_page(ws)
    assert "bx_run" not in again.session_state  # nothing but the workspace's files
    assert any("History of the active model" in c.value for c in again.caption)
    _assert_result_view(again, names, sentence)
    return again


def _last_eval(run_dir: Path) -> pd.Series:
    hist = pd.read_csv(run_dir / "history.csv")
    return hist.dropna(subset=["eval_mlm_acc"]).iloc[-1]


@pytest.fixture
def in_thread(monkeypatch):
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0")


def test_sop_with_span_masking_trains_in_its_own_process_and_opens_on_its_result(monkeypatch):
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "1")  # RunSpec -> job folder -> the worker child -> Trainer
    at = train_page()
    run = _start(at, sent="sop", unit="span", numbers={"sp": 0.3, "sl": 5})
    assert run.in_process
    d = run.run_dirs[0]
    tc = json.loads((d / "train_config.json").read_text())
    assert (tc["sentence_task"], tc["masking_unit"], tc["span_p"], tc["span_max_length"]) == ("sop", "span", 0.3, 5)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["attention_direction"] == "bidirectional" and cfg["heads"]["sentence_task"] == "sop"
    last = _last_eval(d)
    assert 0.0 <= last["eval_nsp_acc"] <= 1.0 and 0.0 <= last["eval_mlm_acc"] <= 1.0
    at.run()  # what the page's fragment does once the run ended
    names = ("MLM (train)", "SOP (train)", "MLM (held-out)", "SOP (held-out)")
    _assert_result_view(at, names, "sop")
    assert f"held-out MLM accuracy **{last['eval_mlm_acc']:.3f}**" in texts(at)
    assert f"SOP accuracy **{last['eval_nsp_acc']:.3f}**" in texts(at)
    probe = live_args(at)["probe"]
    assert probe and all(0.0 <= r[4] <= 1.0 for r in probe)  # P(in order) of the probe pair at every evaluation

    again = _reloads(at, names, "sop")  # F5: a new session finds the finished run
    assert f"SOP accuracy **{last['eval_nsp_acc']:.3f}**" in texts(again)
    assert "span masking" in texts(again)  # the run's settings line names its objective


def test_sentence_task_none_has_no_sentence_curve_and_nothing_breaks_on_nan(in_thread):
    at = train_page()
    run = _start(at, sent="none", unit="whole_word")
    d = run.run_dirs[0]
    tc = json.loads((d / "train_config.json").read_text())
    assert (tc["sentence_task"], tc["masking_unit"]) == ("none", "whole_word")
    assert json.loads((d / "config.json").read_text())["heads"] == {"mlm": True, "nsp": False, "sentence_task": "none"}
    hist = pd.read_csv(d / "history.csv")
    assert hist["nsp_loss"].isna().all() and hist["eval_nsp_acc"].isna().all()  # RoBERTa's MLM alone
    at.run()
    _assert_result_view(at, ("MLM (train)", "MLM (held-out)"), None)
    args = live_args(at)
    assert all(r[2] is None and r[4] is None for r in args["train"])  # the NaN columns travel as nulls, undrawn
    assert all(r[4] is None for r in args["probe"])  # no P(IsNext) without a sentence head
    levels = [c.get("baseline_text", "") for c in args["charts"] if c["baseline"]]
    assert levels == ["MLM unigram baseline "]  # one level, the MLM one: no NSP level anywhere
    assert not any(n.startswith("NSP") for n in trace_names(args, "skills"))  # NaN skills are not drawn
    said = texts(at)
    assert "no sentence task (MLM alone" in said and "Not scored in this run: NSP" in said

    # the sidebar's run summary and the Overview (with its start-here texts) with NaN NSP metrics
    at.switch_page("app_pages/overview.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.label == "held-out MLM accuracy" for m in at.metric)
    assert any("finished, 20/20 steps" in c.value for c in at.sidebar.caption)

    # Reset: the configuration opens again, without the result; a reload opens on the result again
    at.switch_page(TRAIN).run()
    at.button(key="train_reset").click().run()
    assert not at.exception
    assert config_expander(at).proto.expanded and not any(h.value.startswith("Result") for h in at.subheader)
    _reloads(at, ("MLM (train)", "MLM (held-out)"), None)


def test_left_to_right_trains_on_next_tokens_and_says_so(in_thread):
    at = train_page()
    run = _start(at, attn="left_to_right", sent="nsp")
    d = run.run_dirs[0]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["attention_direction"] == "left_to_right" and cfg["heads"]["nsp"] is True
    assert json.loads((d / "train_config.json").read_text())["sentence_task"] == "nsp"
    last = _last_eval(d)
    assert math.isfinite(last["eval_mlm_loss"]) and math.isfinite(last["eval_nsp_acc"])
    at.run()
    names = ("next-token (train)", "NSP (train)", "next-token (held-out)", "NSP (held-out)")
    _assert_result_view(at, names, "nsp")
    args = live_args(at)
    assert args["probe_head"][1] == "next token at [MASK]: top 3"
    assert all(r[1][0] for r in args["probe"])  # the probe asks the model's next token: a candidate every time
    assert any(c.get("baseline_text", "").startswith("next-token unigram baseline") for c in args["charts"])
    assert f"held-out next-token accuracy **{last['eval_mlm_acc']:.3f}**" in texts(at)
    again = _reloads(at, names, "nsp")
    # a new training from the result view: one click on Start (the collapsed form holds its settings)
    again.button(key="train_start").click().run()
    assert not again.exception and not again.error, [e.value for e in again.error]
    new = again.session_state["bx_run"]
    RUNS.append(new)
    assert new is not run and new.jobs[0].train_config.steps == 600  # a new session's form: the preset's own
    assert config_expander(again).label.startswith("Training ·")
    assert not any(h.value.startswith("Result") for h in again.subheader)
    assert new.stop(wait=TRAINING_END)


def test_charts_and_figures_follow_the_objective():
    """The pure builders: names per objective, no sentence curve or level for sentence_task=none."""
    from explorer import livechart
    from explorer.figures import train as ft

    none = ft.Objective("none")
    assert [t["name"] for t in livechart.train_charts(None, none)[0]["traces"]] == ["MLM (train)", "MLM (held-out)"]
    ltr_sop = ft.Objective("sop", causal=True)
    assert [t["name"] for t in livechart.train_charts(None, ltr_sop)[1]["traces"]] == [
        "next-token (train)", "SOP (train)", "next-token (held-out)", "SOP (held-out)"]
    assert [t["col"] for t in livechart.train_charts(None, ltr_sop)[1]["traces"]] == [3, 4, 3, 4]
    assert livechart.train_charts() == livechart.train_charts(None, ft.Objective())  # BERT's by default
    assert ft.objective_of({"sentence_task": "sop", "masking_unit": "span"},
                           {"attention_direction": "left_to_right"}) == ft.Objective("sop", True, "span")
    assert ft.Objective("none", False, "span").summary() == "MLM alone · span masking"

    hist = pd.DataFrame({"step": [1, 2], "mlm_loss": [3.0, 2.5], "nsp_loss": [math.nan] * 2,
                         "eval_mlm_loss": [math.nan, 2.4], "eval_nsp_loss": [math.nan] * 2,
                         "mlm_acc": [0.1, 0.2], "nsp_acc": [math.nan] * 2, "eval_mlm_acc": [math.nan, 0.25],
                         "eval_nsp_acc": [math.nan] * 2})
    fig = ft.accuracy_figure(hist, 0.07, objective=none).to_plotly_json()
    assert [t["name"] for t in fig["data"]] == ["MLM accuracy (train)", "MLM accuracy (held-out)"]
    assert fig["data"][1]["y"] == [0.25]
    assert [s["y0"] for s in fig["layout"]["shapes"]] == [0.07]  # the unigram baseline, nothing for a sentence task
    fig = ft.loss_figure(hist, objective=ft.Objective("sop", causal=True)).to_plotly_json()
    assert [t["name"] for t in fig["data"]] == ["next-token loss (train)", "next-token loss (held-out)"]
    assert "next-token and SOP" in fig["layout"]["title"]["text"]


def test_skills_against_0_9_from_a_skills_history():
    from bertcore.training.history import History
    from explorer.parts import skills_view

    h = History(("step", "seconds", "verb_agreement", "article_a_an", "nsp_same_topic"), ("seconds",))
    for step, va, an in ((10, 0.6, 0.5), (20, 0.92, 0.7), (30, 0.88, 0.8)):
        h.append({"step": step, "seconds": step / 10, "verb_agreement": va, "article_a_an": an,
                  "nsp_same_topic": math.nan})
    rows = skills_view.final_levels(h, skills_view.skill_names(h))
    assert rows == [{"skill": "verb_agreement", "final": 0.88, "step": 20},
                    {"skill": "article_a_an", "final": 0.8, "step": None},
                    {"skill": "nsp_same_topic", "final": None, "step": None}]
    assert skills_view.skill_names(h, sentence_head=False) == ["verb_agreement", "article_a_an"]
