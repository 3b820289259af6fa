"""The widgets that show a session's training: the one-click default run, the untrained notice, a run's progress."""
from __future__ import annotations

import streamlit as st

from bertcore.errors import BertcoreError
from explorer.i18n import mark, tr
from explorer.launch.launcher import default_jobs, get_run, start_run
from explorer.launch.training_run import fmt_seconds
from explorer.page_errors import error_text
from explorer.session.state import get_active

DEFAULT_TRAIN_LABEL = mark("Train the default model (~1 min)")
STATUS_LABELS = {"idle": mark("idle"), "preparing": mark("preparing"), "running": mark("running"),
                 "stopped": mark("stopped"), "finished": mark("finished"), "abandoned": mark("abandoned"),
                 "error": mark("error")}  # TrainingRun.status -> its label on screen


def default_train_button(key: str) -> None:
    """One-click button that trains the default model in the background (built-in corpus, default configs)."""
    run = get_run()
    if run is not None and run.running:
        s = run.snapshot()
        st.info(tr("Training in the background: step {done}/{total}. The sidebar shows its progress; the Train page "
                   "shows the live charts.", done=s.total_done, total=s.total_steps))
        return
    if st.button(tr(DEFAULT_TRAIN_LABEL), key=key, type="primary"):
        try:
            specs = default_jobs()
        except BertcoreError as e:  # a server setting (BERTCORE_TRAINING_DEVICE) that names no device here
            st.error(error_text(e))
            return
        err = start_run(specs)
        if err:
            st.error(err)
        else:
            st.success(tr("Training started in the background; it becomes the active model when done."))


def untrained_notice() -> None:
    """A clear label when the active model is the untrained one."""
    if get_active().kind == "untrained":
        st.info(tr("**Untrained model.** The active model has random weights (seed 0): what you see here is the "
                   "starting point, not learned behaviour. Train the default model below or on the Train page."))



def show_run_status(s, per_job: bool = False) -> None:
    """Progress bar (step, elapsed, ETA) and any error of a ``TrainingRun.snapshot()``.

    ``per_job`` names the job being trained and prefixes errors with its label (Compare page)."""
    fields = dict(status=tr(STATUS_LABELS.get(s.status, s.status)), done=s.total_done, total=s.total_steps,
                  elapsed=fmt_seconds(s.elapsed), eta=fmt_seconds(s.eta))
    if per_job:
        fields["job"] = s.labels[s.job_index]
        text = (tr("{status}: training {job} · step {done}/{total} · elapsed {elapsed} · ETA {eta}", **fields)
                if s.running else tr("{status}: training {job} · step {done}/{total} · elapsed {elapsed}", **fields))
    else:
        text = (tr("{status}: step {done}/{total} · elapsed {elapsed} · ETA {eta}", **fields) if s.running
                else tr("{status}: step {done}/{total} · elapsed {elapsed}", **fields))
    st.progress(s.progress, text=text)
    if s.message:
        st.error(s.message)
    for label, err in zip(s.labels, s.errors):
        if err:
            st.error(tr("{job} stopped: {error}", job=label, error=err) if per_job
                     else tr("Training stopped: {error}", error=err))
