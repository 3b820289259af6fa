"""Attention page, *Head roles* tab: what each head looks at (Clark et al. 2019), when it took that role during
the run, and how much the model needs it (the pruning curve of Michel et al. 2019).

* the role map of the model at the replay slider's step (``explorer.parts.replay``): layers x heads coloured by role
  (``bertcore.analysis.heads``), the seven measures in the hover and in a table / CSV;
* the timeline over the run's saved steps (``bertcore.io.steps``): each head's role per step, under the run's MLM
  loss, so a role that appears together with a drop in the loss lines up (Chen et al. 2023);
* the pruning curve (``bertcore.analysis.pruning``) next to the role map.

Results are kept per model object (``explorer.session.memo``): the replay keeps one model per (run, step), so the role
map is computed once per (run, step, texts) and the timeline once per (run, saved steps, texts). Every number is
the CLI's: ``heads RUN [--step N] [--texts FILE] --json`` and ``ablate RUN --curve [--step N] --json``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from bertcore.analysis import heads as hd
from bertcore.analysis.ablation import held_out_batches
from bertcore.analysis.pruning import pruning_curve
from bertcore.data.corpora import get_corpus
from bertcore.errors import BertcoreError
from bertcore.training import runs
from bertcore.training.run_corpus import run_corpus
from explorer.parts import replay
from explorer.export import head_measures_csv, plotly_config
from explorer.figures.heads import pruning_curve_figure, role_map_figure, role_timeline_figure
from explorer.i18n import frozen, mark, tr
from explorer.session.memo import memo
from explorer.page_errors import user_action

ROLE_NAMES = {"previous-token": mark("previous token"), "next-token": mark("next token"), "self": mark("itself"),
              "[CLS]": "[CLS]", "[SEP]": "[SEP]", "punctuation": mark("punctuation"), "broad": mark("broad"),
              "mixed": mark("mixed")}
AUTO_CURVE_HEADS = 16  # up to this many heads the pruning curve is computed on opening the tab (one evaluation
# of 256 held-out pairs per head: well under a second for the app's models); beyond it, on a button press
CURVE_EXAMPLES = 256  # ablate's default --examples


def _labels() -> dict:
    return {r: tr(n) for r, n in ROLE_NAMES.items()}


def _corpus_for(run_dir: Path | None):
    """The run's own corpus (its held-out split), else the built-in grammar (as ``heads RUN`` does)."""
    try:
        corpus = run_corpus(run_dir) if run_dir is not None else None
    except BertcoreError:  # a checkpoint folder that does not record its corpus
        corpus = None
    return corpus if corpus is not None else get_corpus("builtin")


def _default_texts(active, run_dir: Path | None) -> list:
    tok = active.tokenizer
    cfg = getattr(active.bundle, "train_config", None)
    return memo(tok, ("head_texts", str(run_dir)), lambda: hd.held_out_texts(_corpus_for(run_dir), tok, cfg))


def _texts(active, run_dir, text_a: str, text_b: str | None) -> tuple[list, str]:
    choice = st.radio(tr("Measure the heads on"), ["held_out", "text"], horizontal=True, key="attn_roles_on",
                      format_func=frozen(lambda c: tr("{n} held-out pairs of the corpus (seed {seed})",
                                                      n=hd.DEFAULT_TEXTS, seed=hd.TEXTS_SEED)
                                         if c == "held_out" else tr("the text above")))
    if choice == "text":
        return [(text_a, text_b) if text_b is not None else text_a], "--texts FILE"
    return _default_texts(active, run_dir), ""


def _measures(model, tok, texts: list) -> dict:
    return memo(model, ("head_measures", tuple(map(str, texts))), lambda: hd.head_measures(model, tok, texts))


def _timeline(base, run_dir: Path, steps: list[int], texts: list) -> dict:
    key = ("head_timeline", str(run_dir), tuple(steps), tuple(map(str, texts)))
    return memo(base.model, key, lambda: hd.head_roles_over_steps(run_dir, texts, steps=steps))


def _no_timeline_reason(base, run_dir) -> str:
    if base.kind == "untrained":
        return tr("The active model is untrained: there is no run to replay, so only its current role map is shown. "
                  "Train a model to see when each head takes its role.")
    if base.kind == "pretrained":
        return tr("{label} was pretrained elsewhere and its training steps are not part of the download, so only "
                  "its current role map is shown.", label=base.label)
    if run_dir is None:
        return tr("This model has no run directory with saved steps, so only its current role map is shown.")
    return tr("This run was trained before the weights of every evaluation were kept, so only its final role map "
              "is shown.")


def _cli(command: str, run_dir, step, last, *flags: str) -> str:
    """The CLI line that prints the same numbers (``--step`` left out at the run's last step: its checkpoint)."""
    where = str(run_dir) if run_dir is not None else "RUN"
    at = [f"--step {step}"] if step is not None and step != last else []
    return "`" + " ".join(["python -m bertcore", command, where, *at, *[f for f in flags if f], "--json"]) + "`"


def _corpus_flag(run_dir) -> str:
    """``--corpus X`` for ``ablate`` when the run did not train on the built-in grammar (ablate's default)."""
    if run_dir is None:
        return ""
    try:
        spec = str(runs.read_run_json(run_dir).get("corpus_spec") or "builtin")
    except BertcoreError:  # a checkpoint folder without run.json: the page used the built-in grammar too
        return ""
    if spec.startswith("run:"):
        spec = str(Path(run_dir) / spec[4:])
    return "" if spec == "builtin" else f"--corpus {spec}"


def _curve(model, tok, run_dir, train_config, key: str) -> dict | None:
    if not getattr(model, "has_mlm_head", True) or not getattr(model, "has_nsp_head", True):
        st.info(tr("The pruning curve measures held-out MLM and NSP accuracy, and this model has no MLM or NSP "
                   "head."))
        return None
    L, H = int(model.config.num_hidden_layers), int(model.config.num_attention_heads)
    if L * H > AUTO_CURVE_HEADS and not st.button(tr("Compute the pruning curve ({n} evaluations)", n=L * H + 1),
                                                   key=f"attn_roles_curve_{key}"):
        return None

    def compute():
        batches = held_out_batches(tok, _corpus_for(run_dir), train_config, CURVE_EXAMPLES,
                                   max_len=model.config.max_position_embeddings)
        return pruning_curve(model, batches)

    return memo(model, ("pruning_curve", str(run_dir), CURVE_EXAMPLES), compute)


def render(base, active, fmt: str, text_a: str, text_b: str | None) -> None:
    """The tab: ``base`` is the sidebar's model (its run), ``active`` the model at the replay slider's step."""
    run_dir, steps = replay.saved_steps(base)
    step = replay.chosen_step(base, steps) if steps else None
    last = steps[-1] if steps else None
    st.markdown(tr(
        "Clark et al. (2019) found heads with simple jobs: attend to the **previous** or **next** token, to "
        "**[SEP]**, to **punctuation**, or **broadly** to everything. Each head's seven measures are means over the "
        "query positions of real tokens; a head gets a role when at least {share:.0%} of its attention goes to one "
        "target, *broad* when its entropy is at least {broad:.0%} of uniform attention's, else *mixed*.",
        share=hd.SHARE_THRESHOLD, broad=hd.BROAD_FRACTION))
    texts, flag = _texts(base, run_dir, text_a, text_b)
    labels = _labels()
    with user_action(tr("Measure the heads")) as act:
        res = _measures(active.model, active.tokenizer, texts)
        timeline = _timeline(base, run_dir, steps, texts) if run_dir is not None and len(steps) > 1 else None
    if act.failed:
        return
    finals = timeline["final_role_step"] if timeline is not None else None
    left, right = st.columns([3, 2])
    with left:
        title = tr("Head roles at step {step}", step=step) if step is not None else tr("Head roles")
        fig = role_map_figure({k: res[k] for k in hd.MEASURES}, res["roles"], labels, final_steps=finals,
                              title=title, step_word=tr("since step"), layer_word=tr("layer"), head_word=tr("head"))
        st.plotly_chart(fig, key="attn_roles_map", config=plotly_config("head_roles", fmt))
        st.caption(tr("Recompute: {cmd}", cmd=_cli("heads", run_dir, step, last, flag)))
    with right:
        st.markdown(tr("**Pruning curve** (Michel et al. 2019): heads removed one by one, least important first "
                       "(importance = |gradient of the loss with respect to the head's mask|)."))
        with user_action(tr("Compute the pruning curve")) as act2:
            curve = _curve(active.model, active.tokenizer, run_dir, getattr(base.bundle, "train_config", None),
                           active.key)
        if not act2.failed and curve is not None:
            st.plotly_chart(pruning_curve_figure(curve["points"], tr("MLM accuracy"), tr("NSP accuracy"),
                                                 tr("heads removed"), tr("held-out accuracy"), curve["order"]),
                            key="attn_roles_curve", config=plotly_config("pruning_curve", fmt))
            st.caption(tr("Recompute: {cmd}", cmd=_cli("ablate", run_dir, step, last, "--curve",
                                                                _corpus_flag(run_dir))))
    if timeline is None:
        st.info(_no_timeline_reason(base, run_dir))
    else:
        st.markdown(tr("**Timeline**: each head's role at every saved step, under the run's MLM loss; a diamond "
                       "marks the step from which the head keeps its final role."))
        hist = getattr(base.bundle, "history", None)
        ls, ll = [], []
        if isinstance(hist, pd.DataFrame) and {"step", "mlm_loss"} <= set(hist.columns):
            h = hist[["step", "mlm_loss"]].dropna()
            ls, ll = h["step"].tolist(), h["mlm_loss"].tolist()
        st.plotly_chart(role_timeline_figure(timeline["steps"], [p["roles"] for p in timeline["per_step"]], ls, ll,
                                             finals, labels, tr("MLM loss"), tr("step"), current_step=step),
                        key="attn_roles_timeline", config=plotly_config("head_role_timeline", fmt))
        st.caption(tr("Recompute: {cmd}", cmd=_cli("heads", run_dir, None, None, flag, "--all-steps")))
    rows = hd.head_rows(res)
    shown = pd.DataFrame([{**r, "layer": r["layer"] + 1, "head": r["head"] + 1, "role": labels[r["role"]]}
                          for r in rows])
    st.dataframe(shown, hide_index=True, key="attn_roles_table",
                 column_config={k: st.column_config.NumberColumn(format="%.3f") for k in hd.MEASURES})
    st.download_button(tr("Head measures as CSV"), lambda: head_measures_csv(rows, step),
                       file_name="head_roles.csv" if step is None else f"head_roles_step{step}.csv", mime="text/csv",
                       key="attn_roles_dl", on_click="ignore", help=tr("0-based layer and head, as in the CLI"))
