"""Compare designs: train two variants on the same data and seed, overlay their curves and attention."""
import numpy as np
import streamlit as st

from bertcore.config import BertConfig, TrainConfig
from bertcore.errors import ConfigError
from bertcore.model.bert import init_model
from bertcore.jobs import service
from bertcore.presets import PRESETS
from bertcore.training.same_init import same_init
from explorer.figures import train as ft
from explorer.session import state, workspace
from explorer.export import plotly_config
from explorer.figures.inspect import attention_grid_figure
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import error_text, user_action

_KEY = "bx_compare_run"
SWITCHES = {
    "norm_placement": (mark("LayerNorm placement"), ["post", "pre"]),
    "position_embedding": (mark("position embeddings"), ["learned", "sinusoidal"]),
    "hidden_act": (mark("activation"), ["gelu", "gelu_tanh", "relu"]),
    "mlm_head": (mark("MLM head"), ["transform", "linear"]),
    "nsp_head": (mark("NSP head"), ["pooler", "first_token"]),
}


def _attention_of(bundle):
    """(attentions [L,H,T,T], tokens) of the trainer's probe pair at the last snapshot."""
    snaps = getattr(bundle, "snapshots", None) or []
    if not snaps:
        return None, None
    return snaps[-1].attentions, list(getattr(bundle, "probe_tokens", []) or [])


def _same_init_models(cfg_a, cfg_b, seed: int):
    """(model A, model B, InitReport): both from ``seed``, then B takes A's weights wherever the shapes match."""
    model_a, model_b = init_model(cfg_a, seed), init_model(cfg_b, seed)
    return model_a, model_b, same_init(model_a, model_b)


def render() -> None:


    st.title(tr("Compare two designs"))
    st.markdown(tr(
        "Seed tutorials disagree on small design choices: post-LN (BERT) or pre-LN (codertimo, Annotated "
        "Transformer), learned or sinusoidal positions, GELU or ReLU. Here two `bertcore.training.trainer.Trainer` runs "
        "with the **same corpus, seed, data order and initial weights** (wherever the two designs have the same "
        "tensors) differ in one switch or in a whole preset, trained one after the other in the background, so any "
        "gap in the curves comes from the design."
    ))
    st.latex(r"\text{post-LN: } x \leftarrow \mathrm{LN}(x + f(x)) \qquad \text{pre-LN: } x \leftarrow x + f(\mathrm{LN}(x))")
    state.get_active()
    run = state.get_run(_KEY)
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
        pa = c1.selectbox(tr("preset A"), names, 0, key="compare_preset_a", disabled=running)
        pb = c2.selectbox(tr("preset B"), names, 1, key="compare_preset_b", disabled=running)
        va, vb = pa, pb
        kw_a, kw_b, labels = dict(PRESETS[pa][0]), dict(PRESETS[pb][0]), (f"A: {pa}", f"B: {pb}")

    corpus, tok = workspace.shared_corpus_and_tokenizer()
    report = None
    try:
        base = BertConfig(vocab_size=tok.vocab_size, num_hidden_layers=layers)
        tcfg = TrainConfig(steps=steps, lr=lr, seed=seed, eval_every=max(10, steps // 15),
                           snapshot_every=max(5, steps // 20))
        cfg_a, cfg_b = base.replace(**kw_a), base.replace(**kw_b)
        problem = tr("choose two different values") if va == vb else None
        model_a, model_b, report = _same_init_models(cfg_a, cfg_b, seed) if not problem else (None, None, None)
        jobs = [service.RunSpec(cfg_a, tcfg, name=labels[0], probe=None, model=model_a),
                service.RunSpec(cfg_b, tcfg, name=labels[1], probe=None, model=model_b)]
    except ConfigError as e:
        jobs, problem = [], error_text(e)
    if report is not None and not running:
        (st.success if report.all_shared else st.info)(
            tr("Same start (`bertcore.training.same_init`): {summary}. Same corpus, seed, batches, masks and dropout "
               "masks for both.", summary=report.summary()))
    if problem:
        st.warning(problem)
    b1, b2, _ = st.columns([1, 1, 4])
    if b1.button(tr("Train both"), key="compare_start", type="primary", disabled=running or bool(problem)):
        with user_action("Train both designs"):
            err = state.start_run(jobs, corpus, tok, key=_KEY)
            if err:
                st.error(err)
            else:
                st.rerun()
    if b2.button(tr("Stop"), key="compare_stop", disabled=not running):
        run.stop()
        run.join(2.0)
        st.rerun()

    @st.fragment(run_every=1.0 if running else None)
    @user_action("Show the two trainings")
    def live():
        r = state.get_run(_KEY)
        if r is None:
            st.info(tr("Press **Train both**: variant A trains first, then B, on the built-in corpus."))
            return
        s = r.snapshot()
        state.show_run_status(s, per_job=True)
        hists = {lab: ft.thin_history(h.frame()) for lab, h in zip(s.labels, s.histories) if len(h)}
        if hists:
            g1, g2 = st.columns(2)
            g1.plotly_chart(ft.curves_figure(hists, ["mlm_loss", "eval_mlm_loss"], title=tr("MLM loss"),
                                             yaxis_title=tr("cross-entropy")), key="compare_mlm_loss")
            g2.plotly_chart(ft.curves_figure(hists, ["nsp_loss", "eval_nsp_loss"], title=tr("NSP loss"),
                                             yaxis_title=tr("cross-entropy")), key="compare_nsp_loss")
            g3, g4 = st.columns(2)
            g3.plotly_chart(ft.curves_figure(hists, ["mlm_acc", "eval_mlm_acc"], title=tr("MLM accuracy"),
                                             yaxis_title=tr("accuracy")), key="compare_mlm_acc")
            g4.plotly_chart(ft.curves_figure(hists, ["nsp_acc", "eval_nsp_acc"], title=tr("NSP accuracy"),
                                             yaxis_title=tr("accuracy")), key="compare_nsp_acc")
        if running and not s.running:
            st.rerun()

    live()

    if run is not None and not running and any(b is not None for b in run.results):
        st.subheader(tr("Attention on the same probe pair, after training"))
        st.caption(tr("Each grid is layers × heads (`TrainingRecords.snapshots`, the last snapshot), numbered from 1 as on "
                      "the Attention page; one shared colour scale from 0 to 1 per grid."))
        cols = st.columns(len(run.results))
        for col, job, bundle in zip(cols, run.jobs, run.results):
            with col:
                st.markdown(f"**{job.name}**")
                if bundle is None:
                    st.caption(tr("not trained (stopped before it started)"))
                    continue
                att, toks = _attention_of(bundle)
                if att is None:
                    st.caption(tr("no attention snapshot"))
                    continue
                T = min(len(toks), np.asarray(att).shape[-1])
                fig = attention_grid_figure(np.asarray(att)[:, :, :T, :T], toks[:T], zmax=1.0, width_px=520,
                                            clickable=False)
                st.plotly_chart(fig, key=f"compare_grid_{job.name}", config=plotly_config(f"compare_{job.name}"))
                if st.button(tr("Make this the active model"), key=f"compare_use_{job.name}"):
                    state.set_active("trained", bundle, f"compare {job.name}")
                    st.rerun()


render()
