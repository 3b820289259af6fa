""""Start here": six steps through the app for a first-time learner, each one action on one page and what to look
for. A step is ticked off from what the workspace holds on disk (a finished run, an SAE in a run folder) or from
the step's page having shown its result to this workspace (``mark_done`` writes it into workspace.json), so the
ticks survive F5, a new tab and a server restart. Pages call ``mark_done(step)``; the Overview page draws the list.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from bertcore.training import runs
from explorer.session import workspace
from explorer.i18n import LANG_PARAM, mark, tr

PAGES_DIR = Path(__file__).resolve().parents[2] / "app_pages"
TICK, UNTICKED = ":material/check_box:", ":material/check_box_outline_blank:"
TOUR_KEY = "tour"  # workspace.json: the steps whose page has shown its result
_SEEN = "bx_tour_seen"  # session cache of steps already written (one write per step and session)


@dataclass(frozen=True)
class Step:
    id: str
    title: str  # mark()ed English; shown with tr()
    look: str  # what to look for
    page: str  # file in app_pages/
    params: tuple  # query params that open the page in the right state


STEPS = (
    Step("train", mark("Train the default model"),
         mark("Press Train with the defaults (about a minute). Watch the skills chart: verb agreement (`the cows "
              "[MASK]` → `are`) passes long before the loss flattens."),
         "train.py", ()),
    Step("heads", mark("Find the previous-token head"),
         mark("On Head roles, one head puts most of its weight on the token just before: a diagonal one step "
              "below the main diagonal in its map."),
         "attention.py", (("attn_tab", "Head roles"),)),
    Step("forward", mark("Step through layer 0"),
         mark("Press Next through every stage of layer 0 for `the cat sat on the mat`: Q, K, V, the scores, the "
              "softmax, W^O, the LayerNorm and the FFN, with your model's real numbers."),
         "forward.py", (("fw_stage", "token"), ("fw_layer", "0"), ("fw_a", "the cat sat on the mat"))),
    Step("predict", mark("Fill a mask"),
         mark("Type a sentence with [MASK] and read the top-5 words and their probabilities; compare with the "
              "untrained model side by side."),
         "predict.py", ()),
    Step("lens", mark("See where number lives"),
         mark("Run the logit lens on `the cows [MASK] hungry .`: at which layer does `are` overtake `is`?"),
         "lens_patching.py", (("lp_view", "lens"),)),
    Step("feature", mark("Read a feature"),
         mark("Train a sparse autoencoder on layer 1 and open a feature the grammar names (a topic, pronouns, a "
              "plural verb): its contexts, the words it promotes, and steer it."),
         "features.py", ()),
)
STEP_IDS = tuple(s.id for s in STEPS)


def _recorded(ws: str) -> set:
    data = runs.read_workspace(ws).get(TOUR_KEY)
    return {s for s in data if s in STEP_IDS} if isinstance(data, list) else set()


def done_steps(ws: str | None = None) -> set:
    """The ticked steps of workspace ``ws`` (this session's by default): a finished pretraining run ticks
    "train"; the others are ticked once their page showed them (Features: a feature the grammar names)."""
    ws = ws or workspace.workspace_id()
    done = _recorded(ws)
    for r in runs.list_runs(runs.workspace_dir(ws, create=False)):
        if r.loadable and r.kind == "pretraining" and r.status == "finished":
            done.add("train")
    return done


def mark_done(step: str, active=None) -> None:
    """Record that ``step``'s page showed its result to this workspace (once per session; a read-only disk only
    loses the tick). With ``active`` (the page's model) only a trained model counts."""
    if step not in STEP_IDS:
        raise ValueError(f"unknown tour step {step!r}")
    if active is not None and not getattr(active, "is_trained", False):
        return
    seen = st.session_state.setdefault(_SEEN, set())
    if step in seen:
        return
    ws = workspace.workspace_id()
    try:
        have = _recorded(ws)
        if step not in have:
            runs.write_workspace(ws, **{TOUR_KEY: sorted(have | {step})})
        seen.add(step)
    except OSError:
        pass


def link_params(step: Step) -> dict:
    """The query params of a step's link: its page state, and this browser's workspace and language."""
    params = dict(step.params)
    params["ws"] = workspace.workspace_id()
    lang = st.query_params.get(LANG_PARAM)
    if lang:
        params[LANG_PARAM] = lang
    return params


def render_start_here() -> None:
    """The Overview's "Start here" list: a tick, the step, what to look for, and a link opening the page."""
    done = done_steps()
    st.subheader(tr("Start here"))
    st.caption(tr("{n} of {total} done. Each step is one action on one page; the tick comes from what your "
                  "workspace holds, so it stays after a reload.", n=len(done & set(STEP_IDS)), total=len(STEPS)))
    for k, step in enumerate(STEPS, 1):
        tick = TICK if step.id in done else UNTICKED  # Streamlit's own icon font: no emoji font needed
        c1, c2 = st.columns([3, 1])
        c1.markdown(f"{tick} **{k}. {tr(step.title)}** — {tr(step.look)}")
        if (PAGES_DIR / step.page).is_file():
            with c2:
                st.page_link(f"app_pages/{step.page}", label=tr("Open"), icon=":material/arrow_forward:",
                             query_params=link_params(step))
