"""Session state of the explorer: the browser's workspace, the active model and the background runs.

* Each browser has a private **workspace**: an unguessable id (``?ws=...`` in the URL, also kept in
  ``st.session_state`` because ``st.navigation`` drops query params; app.py writes it back every run).
  Its runs live on disk below ``bertcore.training.runs.workspace_dir(ws)``, with ``workspace.json``
  remembering the active model, so a reload, a deep link or a server restart finds them again.
* The active model is named by a *key*: ``untrained``, ``minilm``, ``run:<run id>`` (a run of this workspace),
  ``dir:<path>`` (a local checkpoint or transformers folder, as the server's folder policy allows:
  explorer.session.folder_access), ``share:<id>`` (a read-only link to one run of another workspace: explorer.session.share_links;
  while it is active the session is read-only: no training, no run list) or ``session:<label>`` (kept in this
  session only).
* The untrained default model is one shared, read-only resource (``st.cache_resource``);
  trainers never touch it (they build their own model).
* The workspace id and the model choices live in ``explorer.session.workspace``; the background runner
  (``TrainingRun``, caps, heartbeat) lives in ``explorer.jobs.training_run`` and the safe checkpoint zips in
  ``explorer.session.uploads``: import their names from there.
"""
from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import streamlit as st

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.config import BertConfig, TrainConfig
from bertcore.jobs.service import RunSpec
from bertcore.data.user_text import is_blank
from bertcore.data.corpus import tutorial_corpus
from bertcore.errors import BertcoreError
from bertcore.io.checkpoint import save_checkpoint
from bertcore.training import runs
from explorer.session import folder_access, share_links
from explorer.i18n import mark, tr
from explorer.jobs.training_run import TrainingRun, find_live, fmt_seconds, register_live
from explorer.jobs.training_slots import ServerBusy, busy_message
from explorer.session.uploads import load_checkpoint_zip
from explorer.page_errors import error_text
from explorer.session.workspace import (
    ACTIVE_KEY,
    MODELS_KEY,
    WS_NOTE_KEY,
    ActiveModel,
    ModelChoices,
    folder_policy,
    remember_active,
    trust_own_dir,
    resolve_model,
    shared_corpus_and_tokenizer,
    runs_of_workspaces,
    untrained_model,
    workspace_id,
    workspace_path,
)

DEFAULT_TRAIN_LABEL = mark("Train the default model (~1 min)")
STATUS_LABELS = {"idle": mark("idle"), "preparing": mark("preparing"), "running": mark("running"),
                 "stopped": mark("stopped"), "finished": mark("finished"), "abandoned": mark("abandoned"),
                 "error": mark("error")}  # TrainingRun.status -> its label on screen
_K_RUN = "bx_run"  # TrainingRun of the Train page / default button
_K_TMP = "bx_tmp"  # this session's temp dir (uploads)
READ_ONLY = mark("This run is shown by a read-only link: it cannot be trained, renamed or deleted here. Copy it into "
                 "your workspace (sidebar) to work with it, or switch to another model.")
_log = logging.getLogger(__name__)


def set_active(kind: str, bundle, label: str) -> ActiveModel:
    """Make ``bundle`` the active model: by its run / folder when it has one, else kept in this session."""
    if kind == "untrained" or bundle is None:
        remember_active("untrained")
        return untrained_model()
    run_dir = getattr(bundle, "run_dir", None)
    if run_dir is not None and Path(run_dir).is_dir():
        remember_active(_key_of_dir(Path(run_dir)))
        return get_active()
    key = f"session:{label}"
    am = ActiveModel(bundle, label, kind, kind != "untrained", key)
    st.session_state.setdefault(MODELS_KEY, {})[key] = am
    remember_active(key)
    return am


def select_active(key_or_label: str) -> str | None:
    """Switch to a model by key (``run:<id>``, ``minilm``, ...) or label; returns an error message or None."""
    choices = ModelChoices()
    key = choices.keys_by_label.get(key_or_label, key_or_label)
    try:
        resolve_model(key, choices._labels)
    except (BertcoreError, OSError) as e:
        return error_text(e)
    remember_active(key)
    return None


def open_folder(path: str) -> str | None:
    """Make a local folder the active model: a bertcore run/checkpoint folder or a transformers folder, as the
    server's folder policy allows (explorer.session.folder_access). Off a personal machine every refusal is one message
    that tells nothing about the disk; on one, the message says what is wrong with the path."""
    if is_blank(path):  # bertcore's rule: spaces and invisible characters only
        return tr("Type the path of a bertcore run/checkpoint folder or a transformers BERT folder first.")
    pol = folder_policy()
    if pol.restricted:
        return _open_restricted(path, pol)
    if folder_access.in_forbidden(path, [runs_of_workspaces()]):
        return tr(folder_access.IN_WORKSPACES)
    try:
        p = Path(path.strip()).expanduser()
        is_dir = p.is_dir()
    except (OSError, RuntimeError, ValueError) as e:  # too long, an unknown ~user, a NUL byte ...
        return tr("“{path}” is not a usable folder path ({error}); give the folder that holds config.json",
                  path=path.strip()[:80], error=getattr(e, 'strerror', None) or e)
    if not is_dir:
        return tr("{path} is not a folder on this server; give the folder that holds config.json", path=p)
    key = f"dir:{p.resolve()}"
    try:
        resolve_model(key)
    except (BertcoreError, OSError) as e:
        return error_text(e)
    remember_active(key)
    return None


def _open_restricted(path: str, pol: folder_access.Policy) -> str | None:
    """open_folder off a personal machine: a folder below BERTCORE_OPEN_ROOTS that loads, else ``REFUSED``."""
    p = folder_access.allowed(path, pol.roots, [runs_of_workspaces()]) if pol.mode == folder_access.ROOTS else None
    if p is None:
        return tr(folder_access.REFUSED)
    key = f"dir:{p}"
    try:
        resolve_model(key)
    except Exception as e:  # noqa: BLE001 - whatever a broken folder raises, the browser learns nothing from it
        _log.info("a folder below BERTCORE_OPEN_ROOTS did not load (%s: %s)", type(e).__name__, e)
        return tr(folder_access.REFUSED)
    remember_active(key)
    return None


def read_only() -> bool:
    """Whether the active model is a run shown by a read-only link (``share:<id>``): nothing may train then."""
    return str(st.session_state.get(ACTIVE_KEY) or "").startswith("share:")


def share_run(run_id: str) -> str | None:
    """Make a read-only link to run ``run_id`` of this workspace (explorer.session.share_links); an error message or None."""
    try:
        share_links.create(workspace_id(), run_id)
    except (BertcoreError, OSError) as e:
        return error_text(e)
    return None


def revoke_share(run_id: str) -> bool:
    """End the read-only link to run ``run_id`` of this workspace; whether there was one."""
    try:
        return share_links.revoke(workspace_id(), run_id)
    except (BertcoreError, OSError):
        return False


def copy_shared() -> str | None:
    """Copy the run the active read-only link shows into this workspace and make the copy the active model."""
    key = str(st.session_state.get(ACTIVE_KEY) or "")
    if not key.startswith("share:"):
        return tr("No read-only link is open.")
    try:
        d = share_links.copy_run(key[len("share:"):], workspace_path(create=True))
    except (BertcoreError, OSError) as e:
        return error_text(e)
    remember_active(f"run:{d.name}")
    return None


def get_active() -> ActiveModel:
    """The model every page shows: this session's choice, else the workspace's, else the shared untrained one."""
    adopt_finished_runs()
    key = st.session_state.get(ACTIVE_KEY)
    if key is None:
        key = str(runs.read_workspace(workspace_id()).get("active") or "untrained")
        st.session_state[ACTIVE_KEY] = key
    try:
        return resolve_model(key, ModelChoices()._labels if key.startswith("run:") else None)
    except (BertcoreError, OSError) as e:
        st.session_state[ACTIVE_KEY] = "untrained"
        st.session_state[WS_NOTE_KEY] = tr("The active model could not be loaded ({error}); showing the untrained "
                                           "model.", error=e)
        return untrained_model()


def session_tmp_dir() -> Path:
    """This session's own temp dir (uploads are extracted only below it)."""
    p = st.session_state.get(_K_TMP)
    if not p or not Path(p).is_dir():
        p = tempfile.mkdtemp(prefix="bertx-session-")
        st.session_state[_K_TMP] = p
    return Path(p)


# ----------------------------------------------------------------------------- runs
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


def start_run(jobs, corpus, tokenizer=None, key: str = _K_RUN) -> str | None:
    """Start a background run stored under ``key``; its jobs write run directories into this workspace.
    Returns an error message (busy server, workspace full, already running) or None."""
    if read_only():
        return tr(READ_ONLY)
    old = get_run(key)
    if old is not None and old.running:
        return tr("A training is already running in this workspace; stop it first.")
    ws = workspace_id()
    on_end = (lambda d: runs.write_workspace(ws, active=f"run:{Path(d).name}")) if key == _K_RUN else None
    try:  # a full workspace, or a server setting (BERTCORE_*) that is not a number
        runs.check_capacity(workspace_path(), new_runs=len(jobs))
        run = TrainingRun(jobs, corpus, tokenizer, runs_dir=workspace_path(create=True), on_end=on_end,
                          corpus_spec=_corpus_spec(corpus) if corpus is not None else None)
    except BertcoreError as e:
        return error_text(e)
    return _launch(ws, key, run)


def _launch(ws: str, key: str, run: TrainingRun) -> str | None:
    """Start ``run``'s thread and keep it under ``key`` (session and workspace); the server-busy message or None."""
    try:
        run.start()
    except ServerBusy as e:
        return busy_message(e)
    except BertcoreError as e:
        return error_text(e)
    st.session_state[key] = run
    register_live(ws, key, run)
    return None


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
    old = get_run()
    if old is not None and old.running:
        return tr("A training is already running in this workspace; stop it first.")
    ws = workspace_id()
    try:
        run = TrainingRun([RunSpec(bc, tc, name=info.name, resume_from=d)], None, runs_dir=workspace_path(create=True),
                          on_end=lambda p: runs.write_workspace(ws, active=f"run:{Path(p).name}"))
    except BertcoreError as e:  # a server setting (BERTCORE_*) that is not a number
        return error_text(e)
    return _launch(ws, _K_RUN, run)


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
            remember_active(_key_of_dir(Path(d)))
            return True
    return False


def _key_of_dir(d: Path) -> str:
    """``run:<id>`` for a run of this workspace, else ``dir:<path>``."""
    return f"run:{d.name}" if d.parent.resolve() == workspace_path().resolve() else f"dir:{d.resolve()}"


def default_jobs():
    _, tok = shared_corpus_and_tokenizer()
    return [RunSpec(BertConfig(vocab_size=tok.vocab_size), TrainConfig(), name="default model", preset="original BERT")]


def default_train_button(key: str) -> None:
    """One-click "Train the default model (~1 min)" (built-in corpus, default configs, background run)."""
    run = get_run()
    if run is not None and run.running:
        s = run.snapshot()
        st.info(tr("Training in the background: step {done}/{total}. The sidebar shows its progress; the Train page "
                   "shows the live charts.", done=s.total_done, total=s.total_steps))
        return
    if st.button(tr(DEFAULT_TRAIN_LABEL), key=key, type="primary"):
        corpus, tok = shared_corpus_and_tokenizer()
        err = start_run(default_jobs(), corpus, tok)
        if err:
            st.error(err)
        else:
            st.success(tr("Training started in the background; it becomes the active model when done."))


def untrained_notice() -> None:
    """A clear label when the active model is the untrained one."""
    if get_active().kind == "untrained":
        st.info(tr("**Untrained model.** The active model has random weights (seed 0): what you see here is the "
                   "starting point, not learned behaviour. Train the default model below or on the Train page."))



def load_uploaded_checkpoint(data: bytes, name: str = "checkpoint.zip"):
    """Safely extract and load an uploaded checkpoint zip (in this session's temp dir), then keep it as a run of
    this workspace so it survives a reload. Raises BertcoreError only; a full workspace says what to delete."""
    bundle = load_checkpoint_zip(data, session_tmp_dir(), name)
    ws_dir = workspace_path()
    runs.check_capacity(ws_dir)
    label = f"uploaded: {name}"
    d = runs.new_run_dir(workspace_path(create=True), label)
    save_checkpoint(bundle, d)
    hist = bundle.history
    steps = int(hist["step"].max()) if hist is not None and len(hist) and "step" in hist else 0
    runs.write_run_json(d, runs.run_meta(label, status="finished", reason="uploaded", steps_done=steps,
                                         total_steps=steps, source=f"uploaded {name}"))
    bundle.run_dir = d
    return bundle


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
