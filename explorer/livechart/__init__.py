"""Live training charts as one small custom component: the Train page's loss and accuracy charts plus the probe
table, and the Fine-tune page's held-out accuracy and training loss of its two models (``charts``).

Why a component: redrawing full plotly figures every second (``st.plotly_chart`` re-sends and re-lays-out the
whole figure) cost chromium enough CPU to slow a training on the same machine.
Here the browser keeps its two plotly.js charts and the server sends **only the rows the browser does not
have yet**; the frontend appends them with ``Plotly.extendTraces`` and prepends new probe rows to its table.

Protocol. The server remembers per component key how many train / eval / probe rows it has sent
(``st.session_state``). A frontend that finds a gap (a new iframe after a page switch, say) reports what it
holds through the component value, and the next render resends from there. plotly.js is the copy inside the
installed ``plotly`` Python package (``plotly/package_data/plotly.min.js``), never a CDN.
"""
from __future__ import annotations

import hashlib
import html
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import plotly
import streamlit as st
import streamlit.components.v1 as components

from bertcore.data.skill_items import CHANCE
from bertcore.training.history import History, number
from explorer.i18n import tr
from explorer.parts.skills_view import skill_name
from explorer.figures.train import Objective

FRONTEND = Path(__file__).parent / "frontend"
TRAIN_COLS = ["mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc"]
EVAL_COLS = ["eval_mlm_loss", "eval_nsp_loss", "eval_mlm_acc", "eval_nsp_acc"]


def _plotly_js() -> Path:
    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def _served_dir() -> Path:
    """A folder holding index.html and plotly.min.js (copied from the plotly package) for Streamlit to serve."""
    src_html = (FRONTEND / "index.html").read_bytes()
    js = _plotly_js()
    tag = hashlib.sha256(src_html + str(js.stat().st_size).encode()).hexdigest()[:12]
    d = Path(tempfile.gettempdir()) / f"bertx-livechart-{tag}"
    if not (d / "index.html").is_file() or not (d / "plotly.min.js").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=".bertx-livechart-", dir=tempfile.gettempdir()))
        shutil.copyfile(js, tmp / "plotly.min.js")
        (tmp / "index.html").write_bytes(src_html)
        try:
            os.replace(tmp, d)  # atomic; another process may have won the race, which is fine
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return d


_component = components.declare_component("livechart", path=str(_served_dir()))


@dataclass
class LiveRows:
    """What a live panel draws, read from ``since`` on: ``train(since)`` and ``evals(since)`` return rows
    ``[step, value, ...]`` (None for a missing value) from row index ``since``, so a poll converts only the rows the
    browser lacks."""

    train: Callable[[int], list]
    evals: Callable[[int], list]


def history_rows(history: History | None) -> LiveRows:
    """The Train page's series of a pretraining History: train rows [step, mlm_loss, nsp_loss, mlm_acc, nsp_acc],
    eval rows [step, eval_mlm_loss, eval_nsp_loss, eval_mlm_acc, eval_nsp_acc]."""
    if history is None:
        return LiveRows(lambda n: [], lambda n: [])
    return LiveRows(lambda n: history.series(TRAIN_COLS, n), lambda n: history.series(EVAL_COLS, n, evals_only=True))


def skills_rows(history: History | None, skills: History | None, names: list[str]) -> LiveRows:
    """``history_rows`` with each eval row extended by the skills scored at that step (``skills``: the trainer's
    skills_history, step x skill), so eval row columns 5.. are the skills in ``names`` order (None before a skill
    was scored at that step)."""
    base = history_rows(history)
    if skills is None or not names:
        return base

    def evals(n: int) -> list:
        rows = base.evals(n)
        by_step = {r[0]: r[1:] for r in skills.series(names)}
        return [r + list(by_step.get(r[0], [None] * len(names))) for r in rows]

    return LiveRows(base.train, evals)


SKILL_COLORS = ["#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e", "#7f7f7f", "#1f77b4",
                "#d62728"]


def train_charts(skill_names: list[str] | None = None, objective: Objective | None = None) -> list[dict]:
    """The Train page's charts: loss and accuracy (training batch faint, held-out bold), and with skills a third
    chart, one line per skill (eval row column 5 + i) and the chance level 0.5 (bertcore.data.skill_items).

    The curves are named after the run's ``objective`` (figures.train.Objective): a left-to-right run's MLM columns
    are its next-token loss and accuracy, a SOP run's sentence curve says SOP, and a sentence_task=none run has no
    sentence curve at all (its columns are NaN); the one level on the accuracy chart is the word task's unigram
    baseline, never a sentence-task one."""
    o = objective or Objective()
    word, sentence = o.word_task, o.sentence_name

    def four(cols):
        out = [{"name": tr("{task} (train)", task=word), "series": "train", "col": cols[0], "color": "#1f77b4"},
               {"name": tr("{task} (held-out)", task=word), "series": "evals", "col": cols[0], "color": "#1f77b4",
                "held": True}]
        if sentence:
            out[1:1] = [{"name": tr("{task} (train)", task=sentence), "series": "train", "col": cols[1],
                         "color": "#d62728"}]
            out.append({"name": tr("{task} (held-out)", task=sentence), "series": "evals", "col": cols[1],
                        "color": "#d62728", "held": True})
        return out

    step = tr("step")
    base = tr("MLM unigram baseline") if not o.causal else tr("next-token unigram baseline")
    charts = [{"id": "loss", "title": tr("Loss (cross-entropy)"), "xtitle": step, "ytitle": tr("nats"),
               "yrange": None, "baseline": False, "traces": four((1, 2))},
              {"id": "acc", "title": tr("Accuracy"), "xtitle": step, "ytitle": tr("accuracy"), "yrange": [0, 1.02],
               "baseline": True, "baseline_text": base + " ", "traces": four((3, 4))}]
    if skill_names:
        charts.append({"id": "skills", "title": tr("Skills (share of items passed)"), "xtitle": step,
                       "ytitle": tr("passed"),
                       "yrange": [0, 1.02], "baseline": False, "hline": CHANCE, "hline_text": tr("chance"),
                       "html_legend": True,  # eight or nine names: below the plot, two to a row
                       "traces": [{"name": skill_name(n), "series": "evals", "col": 5 + i, "held": True,
                                   "color": SKILL_COLORS[i % len(SKILL_COLORS)]} for i, n in enumerate(skill_names)]})
    return charts


def probe_head(objective: Objective | None = None) -> list[str]:
    """The probe table's column heads: the step, the top 3 at the probe's [MASK] (a left-to-right model
    cannot fill it: it guesses that word as the next token after the text before it, ``next_tokens``) and the pair's sentence-task probability: P(IsNext)
    (NSP), P(in order) (SOP, label 0 = the true order) or none (sentence_task=none has no sentence head)."""
    o = objective or Objective()
    fill = tr("fill-mask: top 3") if not o.causal else tr("next token at [MASK]: top 3")
    last = {"nsp": "P(IsNext)", "sop": tr("P(in order)")}.get(o.sentence_task, tr("no sentence head"))
    return [tr("step"), fill, last]


def pair_rows(histories: dict) -> LiveRows:
    """A fine-tune comparison's Histories (Fine-tune page), models in ``histories`` order: train rows ``[step, loss of
    each model]`` at every step and eval rows ``[step, held-out accuracy of each model]`` where both were evaluated.
    Both models step in lock-step, so row i of one history is the same step as row i of the other."""
    hs = list(histories.values())
    if not hs or any(h is None for h in hs):
        return LiveRows(lambda n: [], lambda n: [])

    def both(n: int) -> tuple[list, list]:
        cols = [h.series(["loss", "eval_accuracy"]) for h in hs]
        k = min(len(c) for c in cols)
        train = [[cols[0][i][0]] + [c[i][1] for c in cols] for i in range(k)]
        evals = [[cols[0][i][0]] + acc for i in range(k) if None not in (acc := [c[i][2] for c in cols])]
        return train, evals

    return LiveRows(lambda n: both(n)[0][n:], lambda n: both(n)[1][n:])


def probe_rows(rows: list[dict]) -> list:
    """Probe history rows -> [step, [tok, p], [tok, p], [tok, p], p_is_next] for the frontend."""
    out = []
    for r in rows or []:
        cands = [[str(r.get(f"top{k}", "")), number(r.get(f"p{k}")) or 0.0] for k in (1, 2, 3)]
        out.append([int(r["step"]), *cands, number(r.get("p_is_next"))])
    return out


def probe_caption(probe) -> str:
    """The probe table's heading (HTML): the probe's sentence and pair."""
    if probe is None:
        return html.escape(tr("No probe for this run."))
    return tr("<b>{text}</b><br>pair: “{a}” → “{b}”", text=html.escape(probe.text), a=html.escape(probe.a),
              b=html.escape(probe.b))


def _new_rows(read: Callable[[int], list], since: int) -> tuple[int, list]:
    rows = read(since)
    if not rows and since:  # the browser holds more rows than there are (a shorter history): resend from the end
        since = min(since, len(read(0)))
        rows = read(since)
    return since, rows


def live_panel(run_id: str, steps: int, rows: LiveRows, probe: list, baseline: float | None,
               probe_what: str = "", key: str = "livechart", chart_height: int = 330, charts: list | None = None,
               show_probe: bool | None = None, objective: Objective | None = None) -> None:
    """Draw (or extend) the live panel for run ``run_id``: sends only rows the browser lacks.

    ``rows`` gives the series (``history_rows`` / ``pair_rows``), read only from what the browser has on. ``charts`` (default: the Train page's loss and accuracy charts with the
    probe table) says what to draw: ``[{id, title, ytitle, yrange, baseline, baseline_text, traces: [{name,
    series: "train"|"evals", col, color, held}], hline, hline_text, html_legend}]``, each trace reading column ``col`` of its
    series; a panel with its own ``charts`` has no probe table unless ``show_probe``. ``baseline`` is drawn on the
    charts whose ``baseline`` is true, ``hline`` (e.g. a chance level) on its own chart. ``objective`` names the
    probe table's columns (``probe_head``)."""
    sent_key = f"{key}__sent"
    sent = st.session_state.get(sent_key)
    if not sent or sent.get("run") != run_id:
        sent = {"run": run_id, "train": 0, "evals": 0, "probe": 0, "nonce": 0}
    ask = st.session_state.get(key)  # the frontend's report after it found a gap
    if isinstance(ask, dict) and ask.get("run") == run_id and ask.get("nonce", 0) > sent["nonce"]:
        sent = {"run": run_id, "nonce": ask["nonce"],
                **{k: max(0, int(ask.get(k, 0))) for k in ("train", "evals", "probe")}}
    train_start, train = _new_rows(rows.train, sent["train"])
    evals_start, evals = _new_rows(rows.evals, sent["evals"])
    probe_start = min(sent["probe"], len(probe))
    args = dict(run=run_id, steps=int(steps), baseline=baseline, chart_height=int(chart_height),
                probe_what=probe_what, train_start=train_start, train=train, evals_start=evals_start, evals=evals,
                probe_start=probe_start, probe=probe[probe_start:],
                probe_head=probe_head(objective))
    if charts is not None:
        args.update(charts=charts, show_probe=bool(show_probe))
    st.session_state[sent_key] = {"run": run_id, "train": train_start + len(train), "evals": evals_start + len(evals),
                                  "probe": len(probe), "nonce": sent["nonce"]}
    _component(key=key, default=None, **args)
