"""Read-only links to one run or one study (``?share=<id>``): the registry on disk, shared by every server replica
(no Streamlit).

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

A study folder (run.json kind "study", ``bertcore.launch.study``) is shared whole, whatever its status: the link shows
its table and curves, and each of its runs opens by ``<id>/<run folder name>`` (``lookup_run``); the name is checked
against the folders of the study's ``runs/``, so no other path can be reached through it.
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
from bertcore.launch.study import RUNS_DIR, STUDY_FILE, read_study
from bertcore.message import Message
from bertcore.training import runs

SHARES_DIR = "shares"  # below the runs root: id -> run
OWNER_DIR = ".shares"  # below a workspace: run -> id (a dot folder: never listed as a run)
SHARE_ID_RE = re.compile(r"^[A-Za-z0-9_-]{22}$")
STUDY_RUN_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,120}$")  # a study's run folder: slug(variant)-seed<k>
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


def is_study(d: Path) -> bool:
    """Whether folder ``d`` is a study (run.json kind "study" and its study.json): cheap, no folder walk."""
    try:
        return runs.read_run_json(d).get("kind") == "study" and (d / STUDY_FILE).is_file()
    except InputError:
        return False


def create(ws: str, run_id: str) -> str:
    """A read-only link to a finished or stopped run of ``ws``, or to a study whatever its status (the existing link
    when it has one); its id. InputError when the run is missing, damaged or training."""
    have = share_of(ws, run_id)
    if have is not None:
        return have
    f = _owner_file(ws, run_id)
    d = runs.find_run(runs.workspace_dir(ws, create=False), run_id) if f is not None else None
    if d is None:
        raise InputError(Message("that run is no longer in this workspace"))
    info = runs.read_run(d)
    if info.kind == "study":
        if info.damaged:
            raise InputError(Message("this study is damaged ({why}); it cannot be shared", why=info.damaged))
    elif not info.loadable or info.live:
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
    """The run or study folder a live link opens, or None (a malformed, unknown or revoked id, a deleted or damaged
    run)."""
    if not valid_share_id(share_id):
        return None
    entry = _read(_registry() / f"{share_id}.json")
    ws, run_id = entry.get("workspace"), entry.get("run")
    if not runs.valid_workspace_id(ws) or share_of(ws, run_id) != share_id:
        return None
    d = runs.find_run(runs.workspace_dir(ws, create=False), run_id)
    if d is None:
        return None
    if (d / "model.safetensors").is_file() or is_study(d):  # cheap: a page run asks; loading reads the rest
        return d
    return None


def lookup_run(share_id: object, name: object) -> Path | None:
    """The folder of run ``name`` of the study a live link opens (``<study>/runs/<name>``), or None: the link is not
    a study's, the name is not one of its run folders (no path, no link), or the run has no weights."""
    d = lookup(share_id)
    if d is None or not isinstance(name, str) or not STUDY_RUN_RE.fullmatch(name) or not is_study(d):
        return None
    base = d / RUNS_DIR
    r = base / name
    if r.is_symlink() or not r.is_dir() or Path(os.path.realpath(r)).parent != Path(os.path.realpath(base)):
        return None
    return r if (r / "model.safetensors").is_file() else None


def resolve(target: object) -> Path | None:
    """What a share key's tail opens: ``<id>`` (a run or a study) or ``<id>/<run folder name>`` (a study's run)."""
    if not isinstance(target, str):
        return None
    sid, slash, name = target.partition("/")
    return lookup_run(sid, name) if slash else lookup(sid)


def first_run(share_id: str) -> str | None:
    """The run folder name a study's link opens first: the first scored run in the study's order, or None."""
    d = lookup(share_id)
    data = read_study(d) if d is not None and is_study(d) else None
    for v in (data or {}).get("variants") or []:
        for r in v.get("runs") or []:
            name = Path(str(r.get("dir") or "")).name
            if r.get("status") == "scored" and lookup_run(share_id, name) is not None:
                return name
    return None


def _skip_links_and_dotfiles(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(".") or os.path.islink(os.path.join(folder, n))]


def copy_run(share_id: str, parent: Path) -> Path:
    """Copy the run a live link opens (``<id>``, or ``<id>/<name>``: one run of a shared study) into the folder
    ``parent`` (the viewer's workspace) as a new run of its own.

    The copy is made in a hidden folder and renamed into place, so a failure leaves nothing half-copied; the
    workspace's caps are checked first (RunLimitError). InputError for a dead link or a run that trains now; a
    study itself is not copied (one of its runs is)."""
    src = resolve(share_id)
    if src is None:
        raise InputError(DEAD)
    if is_study(src):
        raise InputError(Message("a study is not copied whole; open one of its runs in the Lab, then copy that run"))
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
