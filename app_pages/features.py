"""Features page: a sparse autoencoder (SAE) on one layer of the active run, its features named by the grammar, and
steering with one (bertcore.analysis.sae_runs, features, steering). SAEs are trained in the background
(explorer.launch.sae_jobs) and kept in the run folder (RUN/saes/, SAELens's layout); the settings, the feature, the
steering text and the replayed step live in the address bar, so a reload shows the same. The numbers equal
``python -m bertcore sae / features / steer ... --json``."""
from pathlib import Path

import streamlit as st

from bertcore.analysis.lens import has_mlm_head
from bertcore.analysis.sae_runs import (DEFAULT_K, SAESpec, check_spec, effect_of, sae_corpus,
                                        summary, text_activations)
from bertcore.analysis.steering import skill_flips, skill_suite, steer_text, steering_vector
from bertcore.data.user_text import is_blank
from bertcore.io.sae_io import FEATURES_FILE, SAES_DIR, hook_of
from bertcore.io.steps import list_steps
from bertcore.training.job import INTERRUPTED, read_state
from explorer.parts import replay, tour
from explorer.launch import sae_jobs
from explorer.launch.training_slots import ServerBusy, busy_message
from explorer.parts import skills_view
from explorer.session import page_caches, state
from explorer.export import plotly_config
from explorer.figures.features import (contexts_html, feature_frame, features_csv, histogram_figure, label_text,
                                       over_training_figure, text_html, top_features_frame, words_frame)
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import user_action
from explorer.session.workspace import workspace_id

SITES = {"residual": mark("residual stream after the layer"), "ffn": mark("FFN activation of the layer")}
KINDS = {"topk": mark("top-k (Gao et al. 2024)"), "standard": mark("ReLU + L1 (Bricken et al. 2023)")}
SIZES = [2, 4, 8, 16, 32]
STAGES = {"data": mark("reading the run's corpus and its activations"), "train": mark("training the SAE"),
          "measure": mark("measuring its quality"), "label": mark("naming its features"), "done": mark("saving")}
DEFAULT_TEXT = "the cow [MASK] muddy ."
URL = dict(bind="query-params", persist_state="session")
K_FLIPS = "ft_flips"  # {(sae dir, feature, strength): skill_flips result} of this session


def _from_url(name: str, options: list, default):
    raw = st.query_params.get(name)
    return next((o for o in options if str(o) == raw), default)


def _number_from_url(name: str, default: float, lo: float, hi: float) -> float:
    try:
        v = float(st.query_params.get(name, default))
    except (TypeError, ValueError):
        return default
    return v if lo <= v <= hi else default


def _settings(model) -> SAESpec:
    """Layer, site, size and sparsity: the SAE to show or train (kept in the URL)."""
    n_layers = int(model.config.num_hidden_layers)
    c = st.columns([1, 2, 1.3, 2.2, 1])
    layers = list(range(n_layers))
    layer = _from_url("ft_layer", layers, n_layers - 1)
    layer = c[0].selectbox(tr("Layer (0-based)"), layers, index=layers.index(layer), key="ft_layer_box")
    site = _from_url("ft_site", list(SITES), "residual")
    site = c[1].selectbox(tr("Activation"), list(SITES), index=list(SITES).index(site), key="ft_site_box",
                          format_func=frozen(lambda s: tr(SITES[s])))
    size = _from_url("ft_size", SIZES, 8)
    size = c[2].selectbox(tr("Features (× width)"), SIZES, index=SIZES.index(size), key="ft_size_box")
    kind = _from_url("ft_kind", list(KINDS), "topk")
    kind = c[3].radio(tr("Sparsity"), list(KINDS), index=list(KINDS).index(kind), key="ft_kind_box",
                      format_func=frozen(lambda k: tr(KINDS[k])))
    if kind == "topk":
        k = int(c[4].number_input("k", 1, 64, int(_number_from_url("ft_k", DEFAULT_K, 1, 64)), key="ft_k_box"))
        spec = SAESpec(layer=layer, site=site, size=size, k=k)
        st.query_params["ft_k"] = str(k)
    else:
        l1 = float(c[4].number_input(tr("L1"), 0.05, 50.0, _number_from_url("ft_l1", 3.0, 0.05, 50.0), 0.5,
                                     key="ft_l1_box"))
        spec = SAESpec(layer=layer, site=site, size=size, k=None, l1=l1)
        st.query_params["ft_l1"] = f"{l1:g}"
    st.query_params.update(ft_layer=str(layer), ft_site=site, ft_size=str(size), ft_kind=kind)
    return spec


def _with_step(spec: SAESpec, step) -> SAESpec:
    return SAESpec(**{**spec.__dict__, "step": step})


def _jobs(run_dir: Path, spec: SAESpec, steps: list[int], model) -> None:
    """The Train buttons and the running job's progress (a fragment polls it; a finished job reruns the page)."""
    ws = workspace_id()
    job = sae_jobs.job_for(ws)
    running = job is not None and job.snapshot().running

    @st.fragment(run_every=0.5 if running else None)
    def progress():
        snap = job.snapshot() if job is not None else None
        if snap is not None and snap.running:
            what = tr(STAGES.get(snap.stage, STAGES["data"]))
            text = tr("{what} · SAE {n} of {total} · {secs:.0f} s", what=what, n=min(snap.done + 1, snap.total),
                      total=snap.total, secs=snap.elapsed) if snap.total > 1 else \
                tr("{what} · {secs:.0f} s", what=what, secs=snap.elapsed)
            st.progress(snap.progress, text=text)
            if st.button(tr("Stop"), key="ft_stop"):
                job.stop()
            return
        if running:  # it finished since this fragment started ticking
            st.rerun()
        if snap is not None and snap.status == "error" and snap.message:
            st.error(tr(snap.message))

    progress()
    last = read_state(run_dir / SAES_DIR) if job is None else None  # the job kept on disk (a restart since?)
    if last is not None and last.get("message") == INTERRUPTED:
        st.info(tr("The last SAE training of this run was interrupted (its server stopped); the SAEs it finished "
                   "are kept. Train again to finish it."))
    if state.read_only():  # a run shown by a read-only link: its folder is not written from here
        st.info(tr(state.READ_ONLY))
        return
    have = (run_dir / SAES_DIR / spec.name() / FEATURES_FILE).is_file()
    c1, c2 = st.columns(2)
    label = tr("Train this SAE again") if have else tr("Train this SAE (about 30 s)")
    if c1.button(label, key="ft_train", disabled=running, type="secondary" if have else "primary"):
        _start(ws, run_dir, spec, model, False)
    if len(steps) >= 2 and c2.button(tr("Train SAEs at 5 saved steps (replay, about 2–3 min)"), key="ft_train_steps",
                                     disabled=running):
        _start(ws, run_dir, spec, model, True)
    if not have and not running:
        st.info(tr("No SAE with these settings yet. Press **Train this SAE**: it learns from the run's own corpus "
                   "and is kept in the run folder."))


def _start(ws: str, run_dir: Path, spec: SAESpec, model, over: bool) -> None:
    with user_action(tr("Train the SAE")) as act:
        check_spec(spec, model)
        try:
            sae_jobs.start_job(ws, run_dir, spec, over)
        except ServerBusy as e:  # the server's training slots are all taken: the one Server busy message
            st.error(busy_message(e))
            return
    if not act.failed:
        st.rerun()


def _replay(run_dir: Path, spec: SAESpec) -> Path | None:
    """The over-training view and its step slider; the SAE folder to show (a step's, or the final one)."""
    final = run_dir / SAES_DIR / spec.name()
    steps = [s for s in list_steps(run_dir) if (run_dir / SAES_DIR / _with_step(spec, s).name() / FEATURES_FILE)
             .is_file()]
    if not steps:
        st.query_params.pop("ft_step", None)
        return final
    options = steps + (["final"] if (final / FEATURES_FILE).is_file() else [])
    chosen = _from_url("ft_step", options, options[-1])
    points = []
    for s in steps:
        d = run_dir / SAES_DIR / _with_step(spec, s).name()
        points.append({"step": s, "families": page_caches.sae_families(str(d), (d / FEATURES_FILE).stat().st_mtime)})
    skills = skills_view.saved_skills(run_dir)
    names = {n: skills_view.skill_name(n) for n in skills_view.skill_names(skills)}
    fig = over_training_figure(points, skills.frame() if skills is not None else None, names,
                               chosen if chosen != "final" else None,
                               tr("When the features appear: an SAE at each saved step"))
    st.plotly_chart(fig, key="ft_over_fig", config=plotly_config("sae_over_training"))
    chosen = st.select_slider(tr("Replay: the SAE of the model after step"), options, value=chosen, key="ft_step_box",
                              format_func=frozen(lambda o: tr("final") if o == "final" else str(o)))
    st.query_params["ft_step"] = str(chosen)
    return final if chosen == "final" else run_dir / SAES_DIR / _with_step(spec, chosen).name()


def _quality(d: Path) -> None:
    s = summary(d)
    c = st.columns(4)
    c[0].metric(tr("variance explained"), f"{s['variance_explained']:.1%}")
    c[1].metric(tr("L0 (active features per token)"), f"{s['l0']:.1f}")
    c[2].metric(tr("dead features"), f"{s['dead_fraction']:.1%}")
    if s.get("loss_recovered") is not None:
        c[3].metric(tr("loss recovered"), f"{s['loss_recovered']:.1%}")
        st.caption(tr("MLM loss on {n} masked held-out tokens: clean {clean:.3f}, with the SAE's reconstruction "
                      "spliced in {spliced:.3f}, with the activation zeroed {zero:.3f}; loss recovered = (zero − "
                      "spliced) / (zero − clean). Dense features (on more than 10% of tokens): {dense:.1%}. "
                      "Trained in {secs:.0f} s on {tokens:,} tokens; measured on {eval:,} other tokens.",
                      n=s.get("masked_tokens", 0), clean=s["clean_loss"], spliced=s["spliced_loss"],
                      zero=s["zero_loss"], dense=s["dense_fraction"], secs=s.get("train_seconds") or 0,
                      tokens=s.get("tokens_train") or 0, eval=s.get("tokens_eval") or 0))


def _pick_feature(d_sae: int) -> int:
    start = int(_number_from_url("feature", 0, 0, d_sae - 1))
    if "ft_feature_box" in st.session_state and not 0 <= st.session_state["ft_feature_box"] < d_sae:
        del st.session_state["ft_feature_box"]
    f = int(st.number_input(tr("Feature"), 0, d_sae - 1, start, key="ft_feature_box"))
    st.query_params["feature"] = str(f)
    return f


def _on_row(ids: list[int]) -> None:
    rows = st.session_state.get("ft_table", {}).get("selection", {}).get("rows", [])
    if rows and 0 <= rows[0] < len(ids):
        st.session_state["ft_feature_box"] = ids[rows[0]]


def _table(table: dict, name: str) -> None:
    df = feature_frame(table)
    ids = df[tr("feature")].tolist()
    labelled = sum(f["label"] is not None for f in table["features"])
    st.markdown(tr("**{n} features**, {k} named by a label with AUROC ≥ {t}. Click a row (or type its number below) "
                   "to open its card; click a column header to sort.", n=len(ids), k=labelled,
                   t=table.get("no_label_auroc", 0.8)))
    st.dataframe(df, hide_index=True, height=300, key="ft_table", on_select=lambda: _on_row(ids),
                 selection_mode="single-row", column_config={
                     "AUROC": st.column_config.NumberColumn(format="%.3f"),
                     tr("precision"): st.column_config.NumberColumn(format="%.3f"),
                     tr("recall"): st.column_config.NumberColumn(format="%.3f"),
                     tr("frequency"): st.column_config.NumberColumn(format="%.4f")})
    st.download_button(tr("Feature table as CSV"), features_csv(table), file_name=f"{name}_features.csv",
                       mime="text/csv", key="ft_csv")
    if not table.get("grammar"):
        st.caption(tr("This run's corpus was not written by the built-in grammar, so the word and the position stand "
                      "in for its labels."))


def _card(table: dict, f: int, sae, cfg, b, d: Path, run_dir: Path) -> None:
    ft = table["features"][f]
    st.subheader(tr("Feature {f}: {label}", f=f, label=label_text(ft["label"])))
    if ft["auroc"] is not None:
        best = label_text(ft.get("best_guess"))
        st.caption(tr("Best label {label}: AUROC {auroc:.3f}, precision {p:.2f}, recall {r:.2f} (when it fires, "
                      "activation > 0). Fires on {freq:.2%} of tokens; largest activation {top:.2f}.", label=best,
                      auroc=ft["auroc"], p=ft["precision"], r=ft["recall"], freq=ft["frequency"],
                      top=ft["max_activation"]))
    c1, c2 = st.columns([3, 2])
    with c1:
        st.markdown(tr("**Where it fires most** (held-out tokens; shade = its activation)"))
        st.html(contexts_html(table, ft))
    with c2:
        zeros = (ft.get("histogram") or {}).get("zeros", 0)
        st.markdown(tr("**Its activations** where it fires"))
        st.plotly_chart(histogram_figure(ft.get("histogram") or {}, ""), key="ft_hist",
                        config=plotly_config(f"feature_{f}_histogram"))
        st.caption(tr("It is zero on the other {n:,} of {total:,} held-out tokens.", n=zeros,
                      total=table.get("n_tokens", 0)))
    note = table.get("output_note")
    if note:
        st.info(tr(note))
    elif ft.get("promotes"):
        st.markdown(tr("**What it does to the output**: the words whose MLM logit rises (left) or falls (right) most "
                       "when its direction, at its largest activation, is added to {hook} at every token.",
                       hook=hook_of(cfg)))
        c3, c4 = st.columns(2)
        c3.dataframe(words_frame(ft["promotes"]), hide_index=True, key="ft_prom")
        c4.dataframe(words_frame(ft["suppresses"]), hide_index=True, key="ft_supp")
        _steer(table, f, sae, cfg, b, d, run_dir)


def _steer(table: dict, f: int, sae, cfg, b, d: Path, run_dir: Path) -> None:
    ft = table["features"][f]
    st.markdown("#### " + tr("Steer with it"))
    c1, c2 = st.columns([3, 2])
    text = c1.text_input(tr("Text with [MASK]"), DEFAULT_TEXT, key="ft_text", **URL)
    strength = c2.slider(tr("Strength (× its largest activation)"), -8.0, 8.0, 2.0, 0.5, key="ft_strength", **URL)
    if ft["max_activation"] <= 0:
        st.info(tr("This feature never fires, so it has no strength to steer with; choose a live feature."))
        return
    hook = hook_of(cfg)
    with user_action(tr("Steer the prediction")) as act:
        r = steer_text(b.model, b.tokenizer, sae, hook, f, float(strength), ft["max_activation"], text)
    if act.failed:
        return
    st.caption(tr("Adds {s} × {a:.2f} × W_dec[{f}] (norm {n:.2f}) to {hook} at every token, through the model's "
                  "replaceable tensors; the same numbers: `python -m bertcore steer RUN SAE --feature {f} --strength "
                  "{s} \"{text}\" --json`.", s=strength, a=ft["max_activation"], f=f, n=r["vector_norm"], hook=hook,
                  text=text))
    for before, after in zip(r["before"][:4], r["after"][:4]):
        c3, c4 = st.columns(2)
        for col, name, res in ((c3, tr("before"), before), (c4, tr("after steering"), after)):
            col.markdown(f"**{name}** · [MASK] {res['position']}")
            col.dataframe([{tr("word"): t, tr("probability"): round(p, 4)} for t, p in res["top"]], hide_index=True)
    effect = effect_of(d, f)
    if effect is None:
        return
    key = (str(d), f, float(strength))
    if st.button(tr("Flip rate over the held-out verb-agreement items"), key="ft_flip_btn"):
        with user_action(tr("Steer the verb-agreement items")), st.spinner(tr("Steering every item…")):
            corpus = sae_corpus(run_dir, 24000)
            suite = skill_suite(corpus, b.tokenizer, "verb_agreement", int(cfg["metadata"].get("context_size", 48)))
            vec = steering_vector(sae, f, float(strength), ft["max_activation"])
            st.session_state.setdefault(K_FLIPS, {})[key] = skill_flips(b.model, suite, hook, vec, effect)
    res = st.session_state.get(K_FLIPS, {}).get(key)
    if res is not None:
        st.markdown(tr("**{rate:.0%}** of the {n} items that can flip toward the word it favours flip; a random "
                       "direction of the same norm flips **{rand:.0%}**.", rate=res["flip_rate"], n=res["can_flip"],
                       rand=res["random_flip_rate"]))


def _any_text(table: dict, f: int, sae, cfg, b) -> None:
    st.subheader(tr("Any text"))
    text = st.text_input(tr("Text"), "the muddy cows eat hay in the barn .", key="ft_any", **URL)
    if is_blank(text):
        return
    with user_action(tr("Read the features of the text")) as act:
        r = text_activations(sae, hook_of(cfg), b.model, b.tokenizer, text)
    if act.failed:
        return
    acts = r["activations"]
    st.markdown(tr("Feature {f} on each token:", f=f))
    st.html(text_html(r["tokens"], acts[:, f], table["features"][f]["max_activation"]))
    st.dataframe(top_features_frame(r["tokens"], acts, table), hide_index=True, key="ft_any_table")


def render():
    st.title(tr("Features"))
    st.markdown(tr(
        "Which features did the model learn? A **sparse autoencoder** (SAE) rewrites one layer's activation as a "
        "sum of a few directions from a larger dictionary, each active on few tokens and often meaning one thing "
        "(Bricken et al. 2023; Cunningham et al. 2023; top-k SAEs, Gao et al. 2024). It is trained here on the "
        "run's own corpus; the grammar that wrote that corpus knows every token's word class, number, gender, "
        "topic and role, so each feature can be **named** and the name measured (AUROC)."))
    st.latex(r"f = \mathrm{TopK}\big(W_{enc}^{\top}(x - b_{dec}) + b_{enc}\big),\qquad \hat x = W_{dec}^{\top} f + b_{dec}")
    active = state.get_active()
    run_dir, steps = replay.saved_steps(active)
    if run_dir is None or active.kind == "untrained":
        st.info(tr("An SAE learns from a run's own corpus and is kept in its folder: train a model on the **Train** "
                   "page (about a minute) or open a run, then come back."))
        return
    st.caption(tr("Active model: **{label}**. The settings, the feature and the texts are in the address bar; the same "
                  "numbers: `python -m bertcore sae RUN --layer L --json`, `features`, `steer`.", label=active.label))
    model = active.model
    if not has_mlm_head(model):
        st.warning(tr("This model has no MLM head: the loss recovered, the output words and steering need one."))
    spec = _settings(model)
    _jobs(run_dir, spec, steps, model)
    d = _replay(run_dir, spec)
    if d is None or not (d / FEATURES_FILE).is_file():
        return
    with user_action(tr("Open the SAE")) as act:
        sae, cfg, training, b, table = page_caches.opened_sae(str(d), (d / FEATURES_FILE).stat().st_mtime, active.bundle)
    if act.failed:
        return
    _quality(d)
    _table(table, d.name)
    f = _pick_feature(sae.d_sae)
    _card(table, f, sae, cfg, b, d, run_dir)
    if table["features"][f].get("label"):  # "Start here": a feature the grammar names was read
        tour.mark_done("feature", active)
    _any_text(table, f, sae, cfg, b)


render()
