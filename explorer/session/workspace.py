"""The browser's workspace and the models it can pick (imported by explorer.session.state, which re-exports it).

A workspace is an unguessable id kept in the URL (``?ws=...``) and in ``st.session_state``; its runs and
workspace.json live below ``bertcore.training.runs.workspace_dir(ws)``. Models are named by a key:
``untrained``, ``minilm``, ``run:<run id>``, ``dir:<path>``, ``share:<share id>`` (a read-only link to another
workspace's run, explorer.session.share_links; ``share:<share id>/<run folder name>``: one run of a shared study) or
``session:<label>``; ``resolve_model`` loads one (once per session and file
version) and ``ModelChoices`` lists them lazily. A ``dir:`` key opens only what the server's folder policy allows
(explorer.session.folder_access, ``folder_policy``), wherever the key came from.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st
import torch

from bertcore.config import BertConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import InputError
from bertcore.io.checkpoint import ModelBundle, load_checkpoint
from bertcore.io.hf_interop import import_hf, packaged_minilm_dir
from bertcore.model.bert import BertForPreTraining
from bertcore.training import runs
from explorer.session import folder_access, share_links
from explorer.i18n import tr

UNTRAINED_LABEL = "fresh untrained (shared)"
MINILM_LABEL = "all-MiniLM-L6-v2 (pretrained)"


WS_KEY = "bx_ws"  # this browser's workspace id
WS_NOTE_KEY = "bx_ws_note"  # a message about the link's workspace id (shown once in the sidebar)
MODELS_KEY = "bx_models"  # key -> ActiveModel: models loaded by this session (a cache for runs and dirs)
ACTIVE_KEY = "bx_active"  # key of the active model
SHARE_PARAM = "share"  # ?share=<id>: a read-only link to one run (explorer.session.share_links)
_SHARE_SEEN_KEY = "bx_share_seen"  # the ?share= id this session has already acted on


# ----------------------------------------------------------------------------- workspace
WS_COOKIE = "bx_ws"  # the browser's last workspace: read only by a tab that lost its server process (below)
_COOKIE_KEY = "bx_ws_cookie"  # the workspace this session has put into that cookie


def _tab_lost_its_server() -> bool:
    """Whether this session is a browser tab that was connected to a server process that does not know it: the
    websocket handshake names an earlier session (Streamlit's third subprotocol entry). That happens when a
    replica behind the proxy died and the tab reconnected to another one (or the server restarted)."""
    try:
        proto = st.context.headers.get("Sec-Websocket-Protocol") or ""
    except Exception:  # noqa: BLE001 - no browser (AppTest, bare mode)
        return False
    parts = [p.strip() for p in proto.split(",")]
    return len(parts) >= 3 and bool(parts[2])


def workspace_id() -> str:
    """This browser's workspace id: session state, else the link's ``?ws=``, else (a tab that reconnected to
    another server process, whose first run may be a page switch, which carries no ``?ws=``) the browser's
    workspace cookie, else a new unguessable one."""
    ws = st.session_state.get(WS_KEY)
    if runs.valid_workspace_id(ws):
        return ws
    q = st.query_params.get("ws")
    if not q and _tab_lost_its_server():
        q = st.context.cookies.get(WS_COOKIE)
    if runs.valid_workspace_id(q):
        ws = q
    else:
        if q:
            st.session_state[WS_NOTE_KEY] = ("The link's workspace id is not valid, so a new, empty workspace was "
                                            "started. Check the link (it ends with ?ws= and 22 characters).")
        ws = runs.new_workspace_id()
    st.session_state[WS_KEY] = ws
    return ws


def sync_workspace_param() -> None:
    """Put ``?ws=`` back into the URL (app.py calls this on every run, before ``pg.run()``)."""
    ws = workspace_id()
    if st.query_params.get("ws") != ws:
        st.query_params["ws"] = ws


def remember_in_browser() -> None:
    """Put this session's workspace into the browser's ``bx_ws`` cookie (a session cookie, gone when the browser
    closes), once per session and only when it differs: a tiny same-origin iframe at the foot of the sidebar
    sets it. Only a tab that reconnects to another server process reads it (``workspace_id``); a new tab or a
    new visitor never does."""
    ws = workspace_id()
    try:
        if not st.context.headers.get("Sec-Websocket-Protocol") or st.context.cookies.get(WS_COOKIE) == ws:
            return  # no browser (AppTest), or already set
    except Exception:  # noqa: BLE001
        return
    if st.session_state.get(_COOKIE_KEY) != ws:  # ws matches WORKSPACE_ID_RE: letters, digits, - and _ only
        st.session_state[_COOKIE_KEY] = ws
        st.sidebar.iframe(f"<script>document.cookie = '{WS_COOKIE}={ws}; path=/; SameSite=Lax';</script>",
                          height=1)


def sync_share_param() -> None:
    """A ``?share=<id>`` link makes its run this session's active model (in this session only: the viewer's
    workspace is not written); a dead or malformed id shows one message and opens nothing. A study's link opens its
    first scored run (``share:<id>/<run folder name>``; the Lab shows the study itself). While a shared run is the
    active model the URL keeps its ``?share=<id>`` (a reload opens it again); otherwise the parameter goes.
    app.py calls this on every run, after ``sync_workspace_param``."""
    q = st.query_params.get(SHARE_PARAM)
    if q and st.session_state.get(_SHARE_SEEN_KEY) != q:
        st.session_state[_SHARE_SEEN_KEY] = q
        d = share_links.lookup(q)
        if d is not None:
            first = share_links.first_run(q) if share_links.is_study(d) else None
            st.session_state[ACTIVE_KEY] = f"share:{q}/{first}" if first else f"share:{q}"
        else:
            st.session_state[WS_NOTE_KEY] = tr(share_links.DEAD)
            if str(st.session_state.get(ACTIVE_KEY, "")).startswith("share:"):
                st.session_state[ACTIVE_KEY] = "untrained"
    active = str(st.session_state.get(ACTIVE_KEY) or "")
    want = active[len("share:"):].partition("/")[0] if active.startswith("share:") else None
    if want and q != want:
        st.query_params[SHARE_PARAM] = want
    elif not want and q is not None:
        st.query_params.pop(SHARE_PARAM, None)


def folder_policy() -> folder_access.Policy:
    """This session's folder policy: where the server listens, BERTCORE_OPEN_ROOTS, and whether the request came
    through a proxy (explorer.session.folder_access)."""
    try:
        address = st.get_option("server.address")
    except Exception:  # noqa: BLE001 - no config (bare mode): treat as every interface
        address = None
    try:
        headers = dict(st.context.headers)
    except Exception:  # noqa: BLE001 - no request (AppTest)
        headers = {}
    return folder_access.policy(address, None, folder_access.proxied(headers))


def runs_of_workspaces() -> Path:
    """The folder of every browser workspace's runs: it never opens by path (explorer.session.folder_access)."""
    return runs.runs_root() / "workspaces"


OWN_DIRS_KEY = "bx_own_dirs"  # st.session_state: folders of runs this session itself trained (server-made paths)


def trust_own_dir(d: Path) -> None:
    """Mark the folder of a run this session trained (``launcher.adopt_finished_runs``) as its own: it opens whatever
    the folder policy, as the path came from the server, never from the browser."""
    st.session_state.setdefault(OWN_DIRS_KEY, set()).add(os.path.realpath(d))


def _may_open_dir(d: Path) -> bool:
    """Whether a ``dir:`` key may load: a folder of this workspace (a fine-tune's model) or of a run this session
    trained, else what the folder policy allows (a key kept in workspace.json from before a policy change is
    checked again)."""
    own = workspace_path().resolve()
    here = Path(os.path.realpath(d))
    if here == own or own in here.parents or str(here) in st.session_state.get(OWN_DIRS_KEY, ()):
        return True
    pol = folder_policy()
    if pol.mode == folder_access.ANY:
        return not folder_access.inside(here, [Path(os.path.realpath(runs_of_workspaces()))])
    if pol.mode == folder_access.NONE:
        return False
    return folder_access.allowed(str(d), pol.roots, [runs_of_workspaces()]) is not None


def workspace_path(create: bool = False) -> Path:
    return runs.workspace_dir(workspace_id(), create=create)


def workspace_runs() -> list:
    """``RunInfo`` of every run of this workspace, newest first (damaged ones included)."""
    return runs.list_runs(workspace_path())


def remember_active(key: str) -> None:
    """Store the active model's key in this session and (for keys that survive a restart) in workspace.json."""
    st.session_state[ACTIVE_KEY] = key
    if not key.startswith("session:"):
        try:
            runs.write_workspace(workspace_id(), active=key)
        except (OSError, InputError):
            pass  # a read-only disk, or the workspace's lock busy for 10 s: the session still has it


# ----------------------------------------------------------------------------- bundles and models
@dataclass
class ActiveModel:
    bundle: Any
    label: str
    kind: str  # "untrained" | "trained" | "uploaded" | "pretrained"
    is_trained: bool
    key: str = ""

    @property
    def model(self):
        return self.bundle.model

    @property
    def tokenizer(self):
        return self.bundle.tokenizer


@st.cache_resource(show_spinner="Building the built-in corpus and tokenizer…")
def shared_corpus_and_tokenizer():
    """The built-in corpus (seed 0) and its word-level tokenizer, shared read-only by all sessions."""
    corpus = builtin_corpus(seed=0)
    return corpus, WordTokenizer.build(corpus.texts())


@st.cache_resource(show_spinner="Building the untrained default model…")
def shared_untrained_bundle():
    """BertForPreTraining(BertConfig(vocab_size=...)) with torch.manual_seed(0), eval mode. Never mutated."""


    _, tok = shared_corpus_and_tokenizer()
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size)).eval()
    return ModelBundle(model=model, tokenizer=tok, history=None, name="untrained default",
                       source="random init, seed 0")


@st.cache_resource(show_spinner="Importing all-MiniLM-L6-v2…")
def shared_minilm():
    """all-MiniLM-L6-v2 imported once per server and shared read-only (None when it is not installed)."""
    d = packaged_minilm_dir()
    return None if d is None else import_hf(d, name="all-MiniLM-L6-v2")


def minilm_available() -> bool:
    try:
        return packaged_minilm_dir() is not None
    except Exception:  # noqa: BLE001 - module missing or broken: just do not offer it
        return False


def untrained_model() -> ActiveModel:
    return ActiveModel(shared_untrained_bundle(), UNTRAINED_LABEL, "untrained", False, "untrained")


def _load_dir(path: Path):
    """A bertcore checkpoint/run folder (load_checkpoint) or a transformers folder (import_hf)."""
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cfg = {}
    if isinstance(cfg, dict) and ("model_type" in cfg or "architectures" in cfg) and "bertcore_version" not in cfg:
        return import_hf(path), "pretrained"
    return load_checkpoint(path), "uploaded"


def resolve_model(key: str, labels: dict | None = None) -> ActiveModel:
    """The ActiveModel for ``key`` (loaded once per session and file version). BertcoreError/OSError if gone."""
    if key == "untrained":
        return untrained_model()
    if key == "minilm":
        bundle = shared_minilm()
        if bundle is None:
            raise InputError("all-MiniLM-L6-v2 is not installed on this server")
        return ActiveModel(bundle, MINILM_LABEL, "pretrained", True, key)
    cache = st.session_state.setdefault(MODELS_KEY, {})
    if isinstance(cache.get(key), ActiveModel):  # registered in this session (set_active, tests)
        return cache[key]
    if key.startswith("session:"):
        raise InputError("that model was kept only in an earlier session; train or upload it again")
    if key.startswith("run:"):
        d = runs.find_run(workspace_path(), key[4:])
        if d is None:
            raise InputError("that run is no longer in this workspace (it was deleted)")
        info = runs.read_run(d)
        if info.damaged:
            raise InputError(f"that run is damaged: {info.damaged}")
        label, kind = (labels or {}).get(key) or info.name, "trained"
    elif key.startswith("share:"):
        d = share_links.resolve(key[len("share:"):])
        if d is not None and share_links.is_study(d):  # a shared study with no run open yet: nothing to load
            name = str(runs.read_run_json(d).get("name") or d.name)
            return ActiveModel(shared_untrained_bundle(), tr("shared study, read-only: {name}", name=name),
                               "untrained", False, key)
        info = runs.read_run(d) if d is not None else None
        if info is None or not info.loadable:
            raise InputError(share_links.DEAD)
        label, kind = tr("shared, read-only: {name}", name=info.name), "trained"
    elif key.startswith("dir:"):
        d = Path(key[4:])
        if not _may_open_dir(d):
            raise InputError(folder_access.REFUSED)
        label, kind = f"folder: {d.name}", "uploaded"
        if (d / runs.RUN_FILE).is_file():
            label, kind = runs.read_run(d).name, "trained"
    else:
        raise InputError(f"unknown model {key!r}")
    try:
        stamp = (d / "model.safetensors").stat().st_mtime_ns
    except OSError:
        stamp = None
    hit = cache.get(key)
    if hit is not None and hit[0] == stamp:
        hit[1].label = label
        return hit[1]
    bundle, loaded_kind = _load_dir(d)
    bundle.run_dir = d  # where its saved steps (replay), history and probe rows are
    am = ActiveModel(bundle, label, kind if key.startswith(("run:", "share:")) else loaded_kind, True, key)
    cache[key] = (stamp, am)
    return am


def _run_labels() -> dict[str, str]:
    """key -> label of every loadable run of the workspace (names made unique with the run id's tail)."""
    out, seen = {}, {}
    for r in workspace_runs():
        if not r.loadable or r.live:
            continue
        label = r.name
        if label in seen or label in (UNTRAINED_LABEL, MINILM_LABEL):
            label = f"{r.name} · {r.id[-6:]}"
        seen[label] = True
        out[f"run:{r.id}"] = label
    return out


class ModelChoices(Mapping):
    """label -> ActiveModel of every model this browser can pick; models load only when looked up."""

    def __init__(self):
        self.keys_by_label = {UNTRAINED_LABEL: "untrained"}
        for key, label in _run_labels().items():
            self.keys_by_label[label] = key
        for key, entry in st.session_state.get(MODELS_KEY, {}).items():
            if isinstance(entry, ActiveModel) or key.startswith("dir:"):
                am = entry if isinstance(entry, ActiveModel) else entry[1]
                self.keys_by_label.setdefault(am.label, key)
        if minilm_available():
            self.keys_by_label[MINILM_LABEL] = "minilm"
        self._labels = {v: k for k, v in self.keys_by_label.items()}

    def __getitem__(self, label: str) -> ActiveModel:
        return resolve_model(self.keys_by_label[label], self._labels)

    def __iter__(self):
        return iter(self.keys_by_label)

    def __len__(self) -> int:
        return len(self.keys_by_label)


def list_models() -> ModelChoices:
    """The shared untrained model, this workspace's runs, MiniLM and this session's other models."""
    return ModelChoices()
