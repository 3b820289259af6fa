"""Read-only links to one run (``?share=<id>``): the registry on disk, shared by every server replica (no Streamlit).

A workspace link (``?ws=``) is its owner's key: it deletes, renames and trains every run in it. A share link
shows one run and nothing else: its id is its own unguessable token (``secrets.token_urlsafe(16)``), never the
workspace id, and whoever opens it can look at that run on every page and copy it into their own workspace.

Two small JSON files, each written atomically, make a link; it opens only while both exist and agree::

    <runs root>/shares/<share id>.json           {"workspace": ..., "run": ..., "created": ...}   id -> run
    <runs root>/workspaces/<ws>/.shares/<run>.json   {"id": ..., "created": ...}                   run -> its id

Creating writes the first, then the second (the link is live only then); revoking removes the second, then the
first, so a crash between the two leaves either a dead link or one the owner still sees and can revoke. No lock
is needed: every file has one writer's random name, so replicas on one runs folder never overwrite each other's
(two presses at once on two replicas may make two ids; the owner's file names the one that works).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path

from bertcore.errors import InputError
from bertcore.io.checkpoint import atomic_write
from bertcore.message import Message
from bertcore.training import runs

SHARES_DIR = "shares"  # below the runs root: id -> run
OWNER_DIR = ".shares"  # below a workspace: run -> id (a dot folder: never listed as a run)
SHARE_ID_RE = re.compile(r"^[A-Za-z0-9_-]{22}$")
DEAD = Message("This read-only link does not open: it was revoked, or its run was deleted. Ask its owner for a new "
               "one.")


def valid_share_id(share_id: object) -> bool:
    return isinstance(share_id, str) and bool(SHARE_ID_RE.fullmatch(share_id))


def _registry(create: bool = False) -> Path:
    d = runs.runs_root() / SHARES_DIR
    if create:
        d.mkdir(parents=True, exist_ok=True)
    return d


def _owner_file(ws: str, run_id: str) -> Path | None:
    if not runs.valid_workspace_id(ws) or not isinstance(run_id, str) or not runs.RUN_ID_RE.fullmatch(run_id):
        return None
    return runs.workspace_dir(ws, create=False) / OWNER_DIR / f"{run_id}.json"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def share_of(ws: str, run_id: str) -> str | None:
    """The id of the live read-only link to run ``run_id`` of workspace ``ws``, or None."""
    f = _owner_file(ws, run_id)
    sid = _read(f).get("id") if f is not None else None
    if not valid_share_id(sid):
        return None
    entry = _read(_registry() / f"{sid}.json")
    return sid if entry.get("workspace") == ws and entry.get("run") == run_id else None


def create(ws: str, run_id: str) -> str:
    """A read-only link to a finished or stopped run of ``ws`` (the existing one when it has one); its id.
    InputError when the run is missing, damaged or training."""
    have = share_of(ws, run_id)
    if have is not None:
        return have
    f = _owner_file(ws, run_id)
    d = runs.find_run(runs.workspace_dir(ws, create=False), run_id) if f is not None else None
    if d is None:
        raise InputError(Message("that run is no longer in this workspace"))
    info = runs.read_run(d)
    if not info.loadable or info.live:
        raise InputError(Message("only a run that has finished or stopped can be shared; wait for it to stop"))
    sid = secrets.token_urlsafe(16)
    stamp = runs.now()
    atomic_write(_registry(create=True) / f"{sid}.json",
                 json.dumps({"workspace": ws, "run": run_id, "created": stamp}) + "\n")
    f.parent.mkdir(exist_ok=True)
    atomic_write(f, json.dumps({"id": sid, "created": stamp}) + "\n")
    return sid


def revoke(ws: str, run_id: str) -> bool:
    """End the read-only link to run ``run_id`` of ``ws`` (its id never opens again); whether there was one."""
    f = _owner_file(ws, run_id)
    if f is None:
        return False
    sid = _read(f).get("id")
    with contextlib.suppress(FileNotFoundError):
        f.unlink()  # first: from here on the link is dead, whatever happens next
    if not valid_share_id(sid):
        return False
    g = _registry() / f"{sid}.json"
    if _read(g).get("workspace") != ws:
        return False
    with contextlib.suppress(FileNotFoundError):
        g.unlink()
    return True


def lookup(share_id: object) -> Path | None:
    """The run folder a live link opens, or None (a malformed, unknown or revoked id, a deleted or damaged run)."""
    if not valid_share_id(share_id):
        return None
    entry = _read(_registry() / f"{share_id}.json")
    ws, run_id = entry.get("workspace"), entry.get("run")
    if not runs.valid_workspace_id(ws) or share_of(ws, run_id) != share_id:
        return None
    d = runs.find_run(runs.workspace_dir(ws, create=False), run_id)
    if d is None or not (d / "model.safetensors").is_file():  # cheap: a page run asks; loading reads the rest
        return None
    return d


def _skip_links_and_dotfiles(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(".") or os.path.islink(os.path.join(folder, n))]


def copy_run(share_id: str, parent: Path) -> Path:
    """Copy the run a live link opens into the folder ``parent`` (the viewer's workspace) as a new run of its own.

    The copy is made in a hidden folder and renamed into place, so a failure leaves nothing half-copied; the
    workspace's caps are checked first (RunLimitError). InputError for a dead link or a run that trains now."""
    src = lookup(share_id)
    if src is None:
        raise InputError(DEAD)
    info = runs.read_run(src)
    if not info.loadable:
        raise InputError(DEAD)
    if info.live:
        raise InputError(Message("that run is training again; copy it when it has stopped"))
    runs.check_capacity(parent)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".copy-{secrets.token_hex(6)}"
    try:
        shutil.copytree(src, tmp, ignore=_skip_links_and_dotfiles)
        name = f"copy of {info.name}"[: runs.MAX_NAME_LEN]
        meta = runs.read_run_json(tmp)
        meta.pop("pid", None)
        meta.update(name=name, source="copied from a read-only link", copied=runs.now())
        runs.write_run_json(tmp, meta)
        dest = runs.new_run_dir(parent, name)
        os.replace(tmp, dest)  # onto the new, empty folder: the copy appears whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
