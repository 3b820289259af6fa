"""The Fine-tune page's comparisons in this browser's workspace (``<workspace>/finetunes/<id>/``).

A comparison started here keeps itself on disk as it trains (``bertcore.finetune.store``), and is
registered with the workspace's live runs (``training_run.register_live``), so a reload or a deep link in a new
tab finds it still running, and the sidebar's heartbeat keeps it alive while the user is on another page. After a
server restart the saved folders are listed and can be reopened. Threads here never call ``st.*``.
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from bertcore.errors import BertcoreError
from bertcore.finetune import store
from bertcore.finetune.comparison import PretrainingComparison
from bertcore.finetune.sweep import SWEEP_STEPS, LabelSweep
from bertcore.training import runs
from bertcore.training.runs import FINETUNES_DIR
from explorer.jobs import training_run, training_slots
from explorer.session import workspace

SLOT = "bx_finetune_run"  # session-state key and live-registry slot of this workspace's comparison
SWEEP_SLOT = "bx_finetune_sweep"  # ... and of its label sweep (bertcore.finetune.sweep.LabelSweep)
_K_LOADED = "finetune_loaded"  # (folder, mtime, models, tokenizer) of the saved comparison opened last


def folder() -> Path:
    return workspace.workspace_path() / FINETUNES_DIR


def live(slot: str = SLOT):
    """This workspace's comparison (or sweep) started in this server process (running or ended), or None."""
    run = st.session_state.get(slot)
    if run is None:
        run = training_run.find_live(workspace.workspace_id(), slot)
        if run is not None:
            st.session_state[slot] = run
    return run


def live_sweep():
    return live(SWEEP_SLOT)


def running() -> bool:
    run = live()
    return run is not None and run.running


def sweeping() -> bool:
    run = live_sweep()
    return run is not None and run.running


def saved():
    """Every saved comparison of this workspace, newest first (``store.SavedComparison``)."""
    return store.list_comparisons(folder())


def start(label: str, task, cfg) -> str | None:
    """Start a comparison from the model called ``label`` in the model switcher; an error message or None."""
    if running() or sweeping():
        return "A fine-tuning is already running in this workspace; stop it first."
    kept = saved()
    cap = runs.max_runs_per_workspace()
    if len(kept) >= cap:
        oldest = ", ".join(f"“{s.name}”" for s in kept[-3:])
        return (f"This workspace keeps at most {cap} fine-tunes (BERTCORE_MAX_RUNS_PER_WORKSPACE) and has "
                f"{len(kept)}; delete one first (under “Saved fine-tunes”), e.g. {oldest}. Nothing is deleted "
                "automatically.")
    try:
        runs.check_capacity(workspace.workspace_path(create=True), new_runs=0)
        am = workspace.list_models()[label]
    except (BertcoreError, OSError, KeyError) as e:
        return f"That model cannot be used: {e}"
    name = f"{task.name}, {cfg.labels or 'all'} labels, from {label}"
    try:
        out = runs.new_run_dir(folder(), task.name)
    except (BertcoreError, OSError) as e:
        return f"Cannot create a folder for the fine-tune: {e}"
    run = PretrainingComparison(am.model, am.tokenizer, task, cfg, out, source=label,
                                abandon_after=training_slots.abandon_seconds(), name=name)
    err = _launch(run, SLOT)
    if err:
        out.rmdir()
    return err


def _launch(run, slot_key: str) -> str | None:
    """Start ``run`` under the server-wide cap on concurrent trainings (BERTCORE_MAX_TRAININGS) and register it."""
    slot = id(run)
    try:
        training_slots.acquire_slot(slot)
    except training_slots.ServerBusy as e:
        return str(e)
    run.start(on_exit=lambda: training_slots.release_slot(slot))
    st.session_state[slot_key] = run
    training_run.register_live(workspace.workspace_id(), slot_key, run)
    return None


def start_sweep(folder_path, pretrained, tokenizer, task, cfg, source: str) -> str | None:
    """Start the label sweep of the comparison kept in ``folder_path`` (its sweep.json); an error or None."""
    if running() or sweeping():
        return "A fine-tuning is already running in this workspace; wait for it or stop it first."
    sweep = LabelSweep(pretrained, tokenizer, task, cfg.replace(steps=SWEEP_STEPS), folder_path, source=source,
                       abandon_after=training_slots.abandon_seconds())
    return _launch(sweep, SWEEP_SLOT)


def open_models(s):
    """({label: classifier}, tokenizer) of a saved comparison, loaded once per session and folder version."""
    stamp = (str(s.path), s.meta_file.stat().st_mtime_ns)
    got = st.session_state.get(_K_LOADED)
    if got is not None and got[0] == stamp:
        return got[1], got[2]
    models, tok = store.load_models(s)
    st.session_state[_K_LOADED] = (stamp, models, tok)
    return models, tok


def delete(s) -> None:
    """Remove a saved comparison (refused while it trains; nothing outside the workspace can be named)."""
    runs.delete_run(s.path, root=folder())
    st.session_state.pop(_K_LOADED, None)
    run = live()
    if run is not None and run.out_dir is not None and Path(run.out_dir) == Path(s.path):  # forget it here too
        st.session_state.pop(SLOT, None)
        training_run.register_live(workspace.workspace_id(), SLOT, None)
