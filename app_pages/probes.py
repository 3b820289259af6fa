"""Probes page: linear probes per layer over training, with control tasks (bertcore.analysis.probing)."""
import hashlib

import streamlit as st

from bertcore.analysis.probing import probe_model, probe_over_steps
from bertcore.data.probe_sets import CSV_PROPERTY, PROPERTIES
from explorer.parts import replay
from explorer.session import state
from explorer.export import plotly_config, probes_csv
from explorer.figures.probes import probe_heatmaps_figure, probe_layers_figure
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import user_action

PROPERTY_PARAM = "property"
_K_CSV = "probe_labels_csv"  # the uploaded labels CSV (bytes) of this session
_K_CURRENT = "probe_current"  # {(model key, property, csv tag): ProbeResult} for models without a run
PROPERTY_LABELS = {
    "position": mark("position: the token's index in its sequence"),
    "number": mark("number: the subject's number (sg/pl) at the masked verb"),
    "topic": mark("topic: the sentence's topic (10 topics) at [CLS]"),
    "category": mark("category: the word's category (noun, verb, determiner, …)"),
    "context_topic": mark("context topic: the sentence's topic at every word that carries none (the, in, .)"),
    CSV_PROPERTY: mark("labels: your own token labels (CSV)"),
}


def _pick_property() -> str:
    raw = st.query_params.get(PROPERTY_PARAM)
    start = raw if raw in PROPERTIES else "number"
    prop = st.selectbox(tr("Property to probe"), PROPERTIES, index=PROPERTIES.index(start), key="probe_property",
                        format_func=frozen(lambda p: tr(PROPERTY_LABELS[p])))
    st.query_params[PROPERTY_PARAM] = prop
    return prop


def _labels_upload() -> bytes | None:
    with st.expander(tr("Your own token labels (CSV)"), expanded=False):
        st.markdown(tr("A UTF-8 CSV with the header `text,labels`: one sentence per row and one label per "
                       "whitespace-separated word, separated by spaces (`_` leaves a word out). Each word is probed at "
                       "its first token. Example:"))
        st.code("text,labels\nthe cow eats hay .,DET NOUN VERB NOUN PUNCT", language=None)
        up = st.file_uploader(tr("Labels CSV"), type=["csv"], key="probe_csv_upload")
        if up is not None:
            st.session_state[_K_CSV] = up.getvalue()
        elif st.button(tr("Forget the uploaded labels"), key="probe_csv_forget"):
            st.session_state.pop(_K_CSV, None)
    return st.session_state.get(_K_CSV)


@user_action(mark("Probe the saved steps"))
def _over_steps(run_dir, prop, labels):
    bar = st.progress(0.0, text=tr("Probing the saved steps…"))
    over = probe_over_steps(run_dir, prop, labels, progress=lambda k, n: bar.progress(k / n, text=tr(
        "Probing step {k} of {n}…", k=k, n=n)))
    bar.empty()
    return over


@user_action(mark("Probe the current model"))
def _current(active, prop, labels):
    tag = "" if labels is None else hashlib.sha256(labels).hexdigest()[:10]
    cache = st.session_state.setdefault(_K_CURRENT, {})
    key = (active.key, prop, tag)
    if key not in cache:
        with st.spinner(tr("Probing every layer…")):
            cache[key] = probe_model(active.model, active.tokenizer, prop, labels)
    return cache[key]


def _line_view(result, heading: str, name: str) -> None:
    lp = result.layers
    fig = probe_layers_figure([x.accuracy for x in lp], [x.control_accuracy for x in lp], lp[0].chance,
                              lp[0].control_chance, title=heading)
    st.plotly_chart(fig, key="probe_layers_fig", config=plotly_config(name))
    st.caption(tr("{n_train} training and {n_test} held-out items (split by sentence); classes: {classes}. "
                  "Selectivity = accuracy − control accuracy.", n_train=result.n_train, n_test=result.n_test,
                  classes=", ".join(result.classes[:20]) + (" …" if len(result.classes) > 20 else "")))
    table = [{tr("layer"): (tr("embeddings") if x.layer == 0 else str(x.layer)), tr("accuracy"): x.accuracy,
              tr("control"): x.control_accuracy, tr("selectivity"): x.selectivity, tr("chance"): x.chance}
             for x in lp]
    st.dataframe(table, hide_index=True, key="probe_table")
    if result.note:
        st.caption(result.note)


def render():
    st.title(tr("Probes"))
    st.markdown(tr(
        "What does each layer *know*, and since when? A **linear probe** (multinomial logistic regression, "
        "Alain & Bengio 2016) is fit on one layer's hidden states to predict a property whose answer the built-in "
        "grammar knows, and scored on held-out sentences. Layer 0 is the embedding output. Beside it the same probe "
        "learns a **control task** (Hewitt & Liang 2019): each word type gets a random label, so only memorising "
        "words helps. A probe is informative where its accuracy clearly exceeds the control's (high selectivity)."))
    st.latex(r"p(y \mid h_\ell) = \mathrm{softmax}(W h_\ell + b),\qquad "
             r"\text{selectivity} = \text{acc} - \text{acc}_{\text{control}}")
    active = state.get_active()
    prop = _pick_property()
    labels = _labels_upload() if prop == CSV_PROPERTY else None
    if prop == CSV_PROPERTY and labels is None:
        st.info(tr("Upload a labels CSV above to probe your own labels."))
        return
    run_dir, steps = replay.saved_steps(active)
    name = f"probes_{prop}"
    if run_dir is None:
        st.caption(tr("**{model}** has no saved training steps (a pretrained, uploaded or untrained model): the "
                      "probes below are those of the current model only.", model=active.label))
        result = _current(active, prop, labels)
        if result is not None:
            _line_view(result, tr("{prop} probes per layer", prop=prop), name)
            st.download_button(tr("Probes as CSV"), probes_csv([0], [result]), file_name=f"{name}.csv",
                               mime="text/csv", key="probe_csv_one")
        return
    replay.at_step(active, "probe")
    step = replay.chosen_step(active, steps) if steps else -1
    over = _over_steps(run_dir, prop, labels)
    if over is None:
        return
    fig = probe_heatmaps_figure(over.matrix("accuracy"), over.matrix("control_accuracy"), over.steps,
                                title=tr("{prop}: what each layer knows, and when", prop=prop), step=step)
    st.plotly_chart(fig, key="probe_heat_fig", config=plotly_config(name))
    st.download_button(tr("Probes over training as CSV"), probes_csv(over.steps, over.results),
                       file_name=f"{name}.csv", mime="text/csv", key="probe_csv_all")
    at = over.steps.index(step) if step in over.steps else len(over.steps) - 1
    shown = over.steps[at]
    _line_view(over.results[at], tr("{prop} probes at step {step}", prop=prop, step=shown) if shown >= 0
               else tr("{prop} probes per layer", prop=prop), f"{name}_step_{shown}")
    st.caption(tr("The same numbers: `python -m bertcore probe RUN --property {prop} --all-steps --json` (0-based "
                  "layers; layer 0 = embeddings).", prop=prop))


render()
