"""Launching a training from the app: start, resume, stop and forget a session's run, and adopt what it made.

A page builds the specs (``bertcore.launch.service.RunSpec``) and calls ``start_run``; the run trains in the
background (``explorer.launch.training_run.TrainingRun``) inside the server's slots
(``explorer.launch.training_slots``: a full server is the one *Server busy* message). The run is kept in the
session under a key and registered per workspace, so a reloaded tab finds it still training (``get_run``).
"""
from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import tutorial_corpus
from bertcore.errors import BertcoreError
from bertcore.launch.service import RunSpec
from bertcore.training import runs
from bertcore.training.job import BackgroundJob
from explorer.i18n import tr
from explorer.launch.training_run import TRAINED_LABEL, TrainingRun, find_live, register_live
from explorer.launch.training_slots import ServerBusy, busy_message, training_runtime
from explorer.page_errors import error_text
from explorer.session.state import READ_ONLY, dir_key, read_only
from explorer.session.workspace import (
    remember_active,
    shared_corpus_and_tokenizer,
    trust_own_dir,
    workspace_id,
    workspace_path,
)

_K_RUN = "bx_run"  # TrainingRun of the Train page / default button


def get_run(key: str = _K_RUN) -> TrainingRun | None:
    """This session's run in ``key``, or the one another session of this workspace started (after a reload)."""
    run = st.session_state.get(key)
    if run is None:
        run = find_live(workspace_id(), key)
        if run is not None:
            st.session_state[key] = run
    return run


def _corpus_spec(corpus) -> str | None:
    """How a resume rebuilds ``corpus``: "builtin" / "tutorial", or None (its pairs are stored in the run)."""
    if corpus is shared_corpus_and_tokenizer()[0]:
        return "builtin"
    if getattr(corpus, "name", None) == "builtin-zh(seed=0)":
        return "builtin-zh"
    t = tutorial_corpus()
    if getattr(corpus, "name", None) == t.name and list(getattr(corpus, "pairs", [])) == list(t.pairs):
        return "tutorial"
    return None


def app_spec(model_config: BertConfig, train_config: TrainConfig, corpus, tokenizer=None, **fields) -> RunSpec:
    """A training as the app launches it, complete where it is built: the session's corpus (and how a resume
    rebuilds it), its tokenizer, the server's device and the app's source label, plus ``fields`` (name, preset,
    probe, ...). Checked once here (``RunSpec.check``: ConfigError says what to change); trained as it is."""
    spec = RunSpec(model_config, train_config, corpus=corpus, corpus_spec=_corpus_spec(corpus),
                   tokenizer=tokenizer if tokenizer is not None else "word", source=TRAINED_LABEL,
                   runtime=training_runtime(), **fields)
    spec.check()
    return spec


def start_run(job, key: str = _K_RUN) -> str | None:
    """Start ``job`` in the background and keep it under ``key`` (session and workspace, so a reloaded tab finds
    it: ``get_run``). ``job`` is a list of specs (``app_spec``; one with ``resume_from`` continues that run),
    trained as one ``TrainingRun`` into this workspace, or a job already built (a study's ``StudyRun``). Returns
    the message that says why it did not start (read-only link, already running, workspace full, server busy) or
    None."""
    if read_only():
        return tr(READ_ONLY)
    old = get_run(key)
    if old is not None and old.running:
        return tr("A training is already running in this workspace; stop it first.")
    try:  # a full workspace, a busy server, or a server setting (BERTCORE_*) that is not a number
        if isinstance(job, BackgroundJob):
            run = job
        else:
            new = sum(spec.resume_from is None for spec in job)  # a resume adds no run
            if new:
                runs.check_capacity(workspace_path(), new_runs=new)
            run = TrainingRun(job, runs_dir=workspace_path(create=True), on_end=_make_active(key))
        run.start()
    except ServerBusy as e:
        return busy_message(e)
    except BertcoreError as e:
        return error_text(e)
    st.session_state[key] = run
    register_live(workspace_id(), key, run)
    return None


def _make_active(key: str):
    """What the Train page's run does at its end: its last run becomes the workspace's active model."""
    if key != _K_RUN:
        return None
    ws = workspace_id()
    return lambda d: runs.write_workspace(ws, active=f"run:{Path(d).name}")


def resume_run(run_id: str) -> str | None:
    """Continue a stopped run of this workspace in the background (Train page slot); an error message or None."""
    if read_only():
        return tr(READ_ONLY)
    d = runs.find_run(workspace_path(), run_id)
    if d is None:
        return tr("That run is no longer in this workspace.")
    info = runs.read_run(d)
    if not info.resumable:
        return tr("“{name}” cannot be resumed ({why}).", name=info.name, why=info.summary())
    try:
        tc = TrainConfig.from_json(d / "train_config.json")
    except (BertcoreError, OSError, ValueError) as e:
        return tr("“{name}” cannot be resumed: its train_config.json is damaged ({error}).", name=info.name, error=e)
    try:  # the model's settings, for the Train page's summary line while it trains (the run's own config.json)
        raw = json.loads((d / "config.json").read_text(encoding="utf-8"))
        bc = BertConfig.from_dict({k: v for k, v in raw.items() if k in BertConfig.__dataclass_fields__})
    except (BertcoreError, OSError, ValueError, TypeError, AttributeError):
        bc = None  # resume itself reports a damaged config.json
    return start_run([RunSpec(bc, tc, name=info.name, resume_from=d, runtime=training_runtime())])


def forget_run(key: str = _K_RUN) -> None:
    """Drop the run in ``key`` from this session and from the workspace's live list (its run dir stays)."""
    st.session_state.pop(key, None)
    register_live(workspace_id(), key, None)


def adopt_finished_runs() -> bool:
    """Make the finished main run (the last job with a model) this browser's active model."""
    run = get_run(_K_RUN)
    if run is None or run.running or run.adopted:
        return False
    run.adopted = True
    for d, bundle in zip(reversed(run.run_dirs), reversed(run.results)):
        if bundle is not None and d is not None:
            trust_own_dir(Path(d))  # a path the server made, not one typed in the browser
            remember_active(dir_key(Path(d)))
            return True
    return False



def default_jobs() -> list[RunSpec]:
    """The one-click default run: the default configs on the built-in corpus (BERT §3.1, §3.2 objectives)."""
    corpus, tok = shared_corpus_and_tokenizer()
    return [app_spec(BertConfig(vocab_size=tok.vocab_size), TrainConfig(), corpus, tok, name="default model",
                     preset="original BERT")]
