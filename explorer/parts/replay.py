"""Replay a run on the Inspect pages: a step slider shows the active model as it was after any saved step.

A run keeps its weights at step 0 and at every held-out evaluation (``bertcore.io.steps``). ``at_step`` draws the
slider for the active model's run and returns the model of the chosen step; the step is in the address bar
(``?step=N``), so a link reopens it, and it is kept in the session for the other pages (``st.navigation`` drops
query parameters on a page switch). At the last saved step the page shows the run's own checkpoint (its
float32 weights), so "final" is exactly the model every other page shows. Step models are loaded once per server
and shared read-only (``st.cache_resource``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import streamlit as st

from bertcore.errors import BertcoreError
from bertcore.io.steps import list_steps, load_step, step_path
from explorer.i18n import tr
from explorer.session.workspace import ActiveModel

STEP_PARAM = "step"
_K_STEP = "bx_replay_step"  # {model key: chosen step}: kept across pages of this session


@st.cache_resource(max_entries=24, show_spinner=False)  # at_step shows the spinner, in the session's language
def _step_bundle(run_dir: str, step: int, mtime: float, _base):
    """The model after ``step`` of ``run_dir`` (``mtime`` of the step file: a rewritten file is reloaded)."""
    bundle = load_step(run_dir, step, bundle=_base)
    bundle.run_dir = Path(run_dir)
    return bundle


def saved_steps(active: ActiveModel) -> tuple[Path | None, list[int]]:
    """(run directory, its saved steps) of the active model; (None, []) for a model without a run."""
    run_dir = getattr(active.bundle, "run_dir", None)
    if run_dir is None or not Path(run_dir).is_dir():
        return None, []
    return Path(run_dir), list_steps(run_dir)


def chosen_step(active: ActiveModel, steps: list[int]) -> int:
    """The step in the URL, else the one this session chose for this model, else the last one."""
    raw = st.query_params.get(STEP_PARAM)
    if raw is not None and str(raw).isdigit() and int(raw) in steps:
        return int(raw)
    kept = st.session_state.get(_K_STEP, {}).get(active.key)
    return kept if kept in steps else steps[-1]


def at_step(active: ActiveModel, key: str) -> ActiveModel:
    """Draw the step slider (when the active model's run has saved steps) and return the model of that step."""
    run_dir, steps = saved_steps(active)
    if run_dir is None:
        st.query_params.pop(STEP_PARAM, None)
        return active
    if not steps:
        if (run_dir / "run.json").is_file():
            st.caption(tr("Replay: this run was trained before the weights of every evaluation were kept, so only "
                          "its final weights can be shown."))
        st.query_params.pop(STEP_PARAM, None)
        return active
    if len(steps) == 1:
        return active
    start = chosen_step(active, steps)
    step = st.select_slider(tr("Replay: the model as it was after step"), steps, value=start,
                            key=f"{key}_replay_{active.key}_{len(steps)}",
                            help=tr("{n} saved steps: step 0 (the initial weights) and every held-out evaluation "
                                    "(`bertcore.io.steps`). The last one is the run's final checkpoint.", n=len(steps)))
    st.session_state.setdefault(_K_STEP, {})[active.key] = step
    if step == steps[-1]:
        st.query_params.pop(STEP_PARAM, None)
        return active
    st.query_params[STEP_PARAM] = str(step)
    try:
        path = step_path(run_dir, step)
        with st.spinner(tr("Loading the model of that step…")):
            bundle = _step_bundle(str(run_dir), int(step), path.stat().st_mtime, active.bundle)
    except (BertcoreError, OSError) as e:
        st.error(tr("The weights of step {step} cannot be loaded ({error}); showing the final model.", step=step, error=e))
        return active
    st.caption(tr("Showing **{model}** as it was after step **{step}** of {last}.", model=active.label, step=step,
                  last=steps[-1]))
    return replace(active, bundle=bundle, label=tr("{model} · step {step}", model=active.label, step=step),
                   key=f"{active.key}@{step}")
