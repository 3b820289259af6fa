"""Compare designs: train two variants on the same data and seed, overlay their curves and attention."""
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from bertcore.errors import ConfigError
from bertcore.io.checkpoint import load_checkpoint
from bertcore.launch import study as S
from bertcore.lab.studies import Study, Variant
from bertcore.presets import PRESETS
from bertcore.training import runs
from bertcore.training.same_init import InitReport
from explorer.figures import train as ft
from explorer.launch import training_run
from explorer.session import state, workspace
from explorer.parts import run_status
from explorer.launch import studies
from explorer.export import plotly_config
from explorer.figures.inspect import attention_grid_figure
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import error_text, user_action

_KEY = "bx_compare_run"  # the live StudyRun's slot (explorer.launch.studies)
_K_INIT = "compare_init"  # (study, seed, vocab) -> the same-start line, once per choice
_K_GRIDS = "compare_grids"  # run dir -> (mtime, attentions, tokens) of its last attention snapshot
STUDY_NAME = "compare-designs"  # study.json "study" of this page's studies
FINISHED = ("trained", "evaluating", "scored")  # cell states of a run that trained all its steps
CELL_LABELS = {"missing": mark("waiting"), "stopped": mark("stopped"), "training": mark("training"),
               "trained": mark("trained"), "evaluating": mark("scoring"), "scored": mark("scored"),
               "failed": mark("failed")}  # bertcore.launch.study.CELL_STATES on screen
SWITCHES = {
    "norm_placement": (mark("LayerNorm placement"), ["post", "pre"]),
    "position_embedding": (mark("position embeddings"), ["learned", "sinusoidal"]),
    "hidden_act": (mark("activation"), ["gelu", "gelu_tanh", "relu"]),
    "mlm_head": (mark("MLM head"), ["transform", "linear"]),
    "nsp_head": (mark("NSP head"), ["pooler", "first_token"]),
}
CURVES = ((["mlm_loss", "eval_mlm_loss"], mark("MLM loss"), mark("cross-entropy"), "compare_mlm_loss"),
          (["nsp_loss", "eval_nsp_loss"], mark("NSP loss"), mark("cross-entropy"), "compare_nsp_loss"),
          (["mlm_acc", "eval_mlm_acc"], mark("MLM accuracy"), mark("accuracy"), "compare_mlm_acc"),
          (["nsp_acc", "eval_nsp_acc"], mark("NSP accuracy"), mark("accuracy"), "compare_nsp_acc"))


def design_study(labels, settings_a: dict, settings_b: dict, layers: int, lr: float, steps: int) -> Study:
    """The comparison as a study of two variants (the switch's values or the presets' BertConfig overrides) on the
    page's base settings; A is the reference whose initial weights B shares (``bertcore.launch.study.initial_model``)."""
    base = {"num_hidden_layers": layers, "lr": lr, "eval_every": max(10, steps // 15),
            "snapshot_every": max(5, steps // 20)}
    return Study(STUDY_NAME, "Compare two designs", "Compare designs", (Variant(labels[0], dict(settings_a)),
                 Variant(labels[1], dict(settings_b))), labels[0], base=base)


def _same_start(study: Study, seed: int, vocab: int):
    """(text, all shared) of B's initial weights beside A's, once per choice."""
    key = (repr(study.to_dict()), seed, vocab)
    got = st.session_state.get(_K_INIT)
    if got is not None and got[0] == key:
        return got[1]
    model, report = S.initial_model(study, study.variants[1].name, seed, vocab)
    cfg_a, cfg_b = (study.configs(v, seed, 1)[0] for v in study.variants)
    differ = {k: (getattr(cfg_a, k), getattr(cfg_b, k)) for k in S.INIT_KEYS if getattr(cfg_a, k) != getattr(cfg_b, k)}
    if report is None and not differ:  # the same tensors: the seed alone gives both the same numbers
        report = InitReport(copied=[n for n, _ in model.named_parameters()])
    if report is not None:
        out = (tr("Same start (`bertcore.training.same_init`): {summary}. Same corpus, seed, batches, masks and "
                  "dropout masks for both.", summary=tr(report.summary())), report.all_shared)
    else:
        what = ", ".join(f"{k}={a} vs {b}" for k, (a, b) in differ.items())
        out = (tr("B draws its own initial weights: the two designs initialise differently ({what}). Same corpus, "
                  "seed, batches, masks and dropout masks for both.", what=what), False)
    st.session_state[_K_INIT] = (key, out)
    return out


def _start(study: Study, steps: int, seed: int) -> str | None:
    """A new study folder in the workspace, its plan, and the runner in the background; an error message or None."""
    if state.read_only():
        return tr(state.READ_ONLY)
    runs.check_capacity(workspace.workspace_path(create=True), new_runs=1)
    a, b = (v.name for v in study.variants)
    out = studies.new_folder(f"compare {a} {b}")
    try:
        plan = S.plan(study, out, seeds=1, steps=steps, corpus="builtin", first_seed=seed)
        plan.name = f"Compare: {a} vs {b}"
        S.write_study(plan)  # a reload finds it at once, before the runner's thread has started
        err = studies.start(plan, _KEY)
    except Exception:  # shown by the caller's user_action; no half-made folder stays behind
        shutil.rmtree(out, ignore_errors=True)
        raise
    if err:
        shutil.rmtree(out, ignore_errors=True)
    return err


def _latest() -> dict | None:
    """The newest Compare study of this workspace on disk (study.json), or None."""
    for r in studies.workspace_studies():
        data = S.read_study(r.path)
        if data is not None and data.get("study") == STUDY_NAME:
            return data
    return None


def _cells(data: dict) -> list[tuple[str, int, dict]]:
    """(variant, seed, run entry) of every run of a study's data, in the study's order."""
    return [(v["name"], int(r["seed"]), r) for v in data.get("variants") or [] for r in v.get("runs") or []]


def _histories(data: dict, live: dict) -> dict:
    """variant -> its history frame: the live rows of this process's runs, else the run's history.csv."""
    out = {}
    for name, seed, r in _cells(data):
        h = live.get((name, seed))
        frame = h.frame() if h is not None else None
        if frame is None:
            try:
                frame = pd.read_csv(Path(r["dir"]) / "history.csv")
            except (OSError, ValueError):
                continue
        if len(frame):
            out[name] = ft.thin_history(frame)
    return out


def _status_line(s) -> None:
    states = " · ".join(f"{name}: {tr(CELL_LABELS[c]) if c in CELL_LABELS else c}" for (name, _), c in s.states.items())
    fields = dict(status=tr(run_status.STATUS_LABELS.get(s.status, s.status)), done=s.total_done, total=s.total_steps,
                  elapsed=training_run.fmt_seconds(s.elapsed), eta=training_run.fmt_seconds(s.eta))
    text = (tr("{status}: step {done}/{total} of both designs · elapsed {elapsed} · ETA {eta}", **fields) if s.running
            else tr("{status}: step {done}/{total} of both designs · elapsed {elapsed}", **fields))
    st.progress(min(1.0, s.total_done / max(1, s.total_steps)), text=text)
    st.caption(tr("Runs: {states} (a finished run is scored as the Lab scores it, `bertcore.lab.evaluate`).",
                  states=states))


def _grid(name: str, d: Path) -> None:
    """The last attention snapshot of run ``d`` (its snapshots.safetensors) and "Make this the active model"."""
    st.markdown(f"**{name}**")
    try:
        stamp = (d / "model.safetensors").stat().st_mtime_ns
    except OSError:
        st.caption(tr("not trained (stopped before it started)"))
        return
    cache = st.session_state.setdefault(_K_GRIDS, {})
    hit = cache.get(str(d))
    if hit is None or hit[0] != stamp:
        with user_action("Open the run") as act:
            bundle = load_checkpoint(d)
        if act.failed:
            return
        snaps = list(getattr(bundle, "snapshots", None) or [])
        hit = (stamp, snaps[-1].attentions if snaps else None, list(getattr(bundle, "probe_tokens", []) or []))
        cache[str(d)] = hit
    _, att, toks = hit
    if att is None:
        st.caption(tr("no attention snapshot"))
    else:
        T = min(len(toks), np.asarray(att).shape[-1])
        fig = attention_grid_figure(np.asarray(att)[:, :, :T, :T], toks[:T], zmax=1.0, width_px=520, clickable=False)
        st.plotly_chart(fig, key=f"compare_grid_{name}", config=plotly_config(f"compare_{name}"))
    if st.button(tr("Make this the active model"), key=f"compare_use_{name}"):
        err = state.select_active(f"dir:{d}")
        if err:
            st.error(err)
        else:
            st.rerun()


def render() -> None:
    st.title(tr("Compare two designs"))
    st.markdown(tr(
        "Seed tutorials disagree on small design choices: post-LN (BERT) or pre-LN (codertimo, Annotated "
        "Transformer), learned or sinusoidal positions, GELU or ReLU. Here two runs with the **same corpus, seed, "
        "data order and initial weights** (wherever the two designs have the same tensors) differ in one switch or in "
        "a whole preset: a small study (`bertcore.launch.study`, the Lab's runner) that trains both side by side in "
        "the background, so any gap in the curves comes from the design."
    ))
    st.latex(r"\text{post-LN: } x \leftarrow \mathrm{LN}(x + f(x)) \qquad \text{pre-LN: } x \leftarrow x + f(\mathrm{LN}(x))")
    state.get_active()
    run = studies.live(_KEY)
    running = run is not None and run.running

    mode = st.radio(tr("Compare"), [mark("one switch"), mark("two presets")], horizontal=True, key="compare_mode",
                    disabled=running, format_func=frozen())
    d1, d2, d3, d4 = st.columns(4)
    steps = d1.slider(tr("steps each"), 20, 2000, 300, 10, key="compare_steps", disabled=running)
    layers = d2.slider(tr("layers"), 1, 4, 2, key="compare_layers", disabled=running)
    lr = d3.select_slider(tr("learning rate"), [3e-4, 1e-3, 2e-3, 5e-3, 1e-2], 2e-3, key="compare_lr",
                          disabled=running, format_func=lambda x: f"{x:g}")
    seed = int(d4.number_input(tr("seed"), 0, 2**31 - 1, 0, key="compare_seed", disabled=running))
    c1, c2, c3 = st.columns(3)
    if mode == "one switch":
        switch = c1.selectbox(tr("Switch to compare"), list(SWITCHES), format_func=frozen(lambda k: tr(SWITCHES[k][0])),
                              key="compare_switch", disabled=running)
        values = SWITCHES[switch][1]
        va = c2.selectbox(tr("variant A"), values, 0, key=f"compare_a_{switch}", disabled=running)
        vb = c3.selectbox(tr("variant B"), values, 1, key=f"compare_b_{switch}", disabled=running)
        kw_a, kw_b, labels = {switch: va}, {switch: vb}, (f"A: {va}", f"B: {vb}")
    else:
        names = list(PRESETS)
        va = c1.selectbox(tr("preset A"), names, 0, key="compare_preset_a", disabled=running)
        vb = c2.selectbox(tr("preset B"), names, 1, key="compare_preset_b", disabled=running)
        kw_a, kw_b, labels = dict(PRESETS[va][0]), dict(PRESETS[vb][0]), (f"A: {va}", f"B: {vb}")

    _, tok = workspace.shared_corpus_and_tokenizer()  # the built-in corpus's vocabulary, as the runner builds it
    study, problem, same = None, tr("choose two different values") if va == vb else None, None
    if not problem:
        try:
            study = design_study(labels, kw_a, kw_b, layers, lr, steps)
            for v in study.variants:
                study.configs(v, seed, steps)  # a bad combination says so now
            same = _same_start(study, seed, tok.vocab_size)
        except ConfigError as e:
            study, problem = None, error_text(e)
    if same is not None and not running:
        (st.success if same[1] else st.info)(same[0])
    if problem:
        st.warning(problem)
    b1, b2, _ = st.columns([1, 1, 4])
    if b1.button(tr("Train both"), key="compare_start", type="primary", disabled=running or study is None):
        with user_action("Train both designs"):
            err = _start(study, steps, seed)
            if err:
                st.error(err)
            else:
                st.rerun()
    if b2.button(tr("Stop"), key="compare_stop", disabled=not running):
        run.stop()
        run.join(2.0)
        st.rerun()
    _results(run)


def _results(run) -> None:
    """The curves of the live comparison (or the newest on disk: after a reload or a restart), then the attention
    grid of every run that finished."""
    running = run is not None and run.running
    shown = run.snapshot().data if run is not None else _latest()
    finished_at_draw = sum(s in FINISHED for s in run.snapshot().states.values()) if running else 0

    @st.fragment(run_every=1.0 if running else None)
    @user_action("Show the two trainings")
    def live():
        if shown is None:
            st.info(tr("Press **Train both**: both designs train side by side on the built-in corpus (one after the "
                       "other when only one training slot is free), then each is scored."))
            return
        if run is not None:
            s = run.snapshot()
            data, hist = s.data, s.histories
            _status_line(s)
            for problem in ([s.message] if s.message else []):
                st.error(problem)
        else:
            data, hist = shown, {}
            st.caption(tr("“{name}”, {status}: kept in `{path}`.", name=" vs ".join(v["name"] for v in data["variants"]),
                          status=tr(run_status.STATUS_LABELS.get(data.get("status"), data.get("status") or "")),
                          path=data.get("path")))
        for name, _, r in _cells(data):
            if r.get("error"):
                st.error(f"{name}: {r['error']}")
        hists = _histories(data, hist)
        if hists:
            for row in (CURVES[:2], CURVES[2:]):
                for col, (cols, title, ytitle, key) in zip(st.columns(2), row):
                    col.plotly_chart(ft.curves_figure(hists, cols, title=tr(title), yaxis_title=tr(ytitle)), key=key)
        if running and (not s.running or sum(x in FINISHED for x in s.states.values()) > finished_at_draw):
            st.rerun()  # ended, or a run finished: the page draws its attention grid

    live()
    data = run.snapshot().data if run is not None else shown
    done = [(name, Path(r["dir"])) for name, _, r in _cells(data or {})
            if r.get("status") in FINISHED or (not running and r.get("status") == "stopped")]
    if not done:
        return
    st.subheader(tr("Attention on the same probe pair, after training"))
    st.caption(tr("Each grid is layers × heads (`TrainingRecords.snapshots`, the last snapshot, read back from the run's "
                  "`snapshots.safetensors`), numbered from 1 as on the Attention page; one shared colour scale from 0 to "
                  "1 per grid."))
    for col, (name, d) in zip(st.columns(len(data["variants"])), done):
        with col:
            _grid(name, d)


render()
