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
* The workspace id and the model choices live in ``explorer.session.workspace`` and the safe checkpoint zips in
  ``explorer.session.uploads``: import their names from there. Launching a training (start, resume, stop,
  forget, adoption) is ``explorer.launch.launcher``; the widgets that show a run are ``explorer.parts.run_status``.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import streamlit as st

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.data.user_text import is_blank
from bertcore.errors import BertcoreError
from bertcore.io.checkpoint import save_checkpoint
from bertcore.training import runs
from explorer.session import folder_access, share_links
from explorer.i18n import mark, tr
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
    resolve_model,
    runs_of_workspaces,
    untrained_model,
    workspace_id,
    workspace_path,
)

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
        remember_active(dir_key(Path(run_dir)))
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


def dir_key(d: Path) -> str:
    """The active-model key of a run folder: ``run:<id>`` for a run of this workspace, else ``dir:<path>``."""
    return f"run:{d.name}" if d.parent.resolve() == workspace_path().resolve() else f"dir:{d.resolve()}"


def get_active() -> ActiveModel:
    """The model every page shows: this session's choice, else the workspace's, else the shared untrained one."""
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
