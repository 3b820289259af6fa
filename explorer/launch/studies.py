"""This browser's studies (``bertcore.launch.study``): where they live in the workspace and the one way to start one.

A study folder is a direct child of the workspace (``<workspace>/<id>/``, run.json kind "study"), so it is one entry
of the workspace's run list while its runs stay inside it (``runs/``); a fine-tune page keeps its own below
``<workspace>/finetunes/``. ``start`` launches a ``explorer.launch.study_run.StudyRun`` under a session-state key
as a training is launched (``explorer.launch.launcher.start_run``: kept with the workspace's live runs), so a reload
or a deep link finds it still running and the sidebar's heartbeat keeps it alive while the user looks at another page.

The Lab page's own steps: ``begin`` (a new folder, its plan, started), ``resume`` (Start again: only what is
missing), ``delete``, ``view`` (the live snapshot or study.json) and ``shared_study`` (the study a read-only link
shows, explorer.session.share_links). An uploaded corpus reaches the runs as a file in the study folder
(``corpus.tsv``, its pairs one ``A<TAB>B`` a line), so the worker loads it by path and Start again finds it there.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import streamlit as st

from bertcore.errors import BertcoreError, InputError
from bertcore.io.checkpoint import atomic_write
from bertcore.launch import study as S
from bertcore.lab.studies import Study
from bertcore.training import runs
from explorer.i18n import tr
from explorer.launch import launcher
from explorer.launch.study_run import StudyRun, StudySnapshot, lanes_for
from explorer.page_errors import error_text
from explorer.session import share_links, workspace

LAB_SLOT = "bx_study"  # session-state key and live-registry slot of the Lab page's study
CORPUS_FILE = "corpus.tsv"  # an uploaded corpus, kept in its study's folder


def new_folder(name: str, parent: Path | None = None) -> Path:
    """A new, empty study folder below ``parent`` (default: the workspace), named after ``name``."""
    return runs.new_run_dir(parent if parent is not None else workspace.workspace_path(create=True), name)


def workspace_studies() -> list:
    """``RunInfo`` of every study folder of this workspace, newest first."""
    return [r for r in workspace.workspace_runs() if r.kind == "study"]


def live(slot: str = LAB_SLOT) -> StudyRun | None:
    """The study this workspace started in ``slot`` in this server process (running or ended), or None."""
    return launcher.get_run(slot)


def running(slot: str = LAB_SLOT) -> bool:
    run = live(slot)
    return run is not None and run.running


def start(plan: S.Plan, slot: str = LAB_SLOT, lanes: int | None = None) -> str | None:
    """Start (or finish) ``plan`` in the background under ``slot``; an error message or None."""
    old = live(slot)
    if old is not None and old.running:
        return tr("A study is already running here; stop it first.")
    if not plan.todo:
        return None
    try:
        run = StudyRun(plan, lanes_for(plan, lanes))
    except BertcoreError as e:
        return error_text(e)
    return launcher.start_run(run, slot)


def forget(slot: str = LAB_SLOT) -> None:
    """Drop the study in ``slot`` from this session and the workspace's live list (its folder stays)."""
    launcher.forget_run(slot)


def _same(a, b) -> bool:
    return a is not None and b is not None and Path(a).resolve() == Path(b).resolve()


def find(study_id: object) -> Path | None:
    """The folder of study ``study_id`` of this workspace (a ``?study=`` value), or None (ids are validated)."""
    d = runs.find_run(workspace.workspace_path(), study_id) if isinstance(study_id, str) else None
    return d if d is not None and share_links.is_study(d) else None


def shared_study() -> tuple[str, Path] | None:
    """(share id, study folder) of the study a read-only link shows in this session, or None."""
    key = str(st.session_state.get(workspace.ACTIVE_KEY) or "")
    if not key.startswith("share:"):
        return None
    sid = key[len("share:"):].partition("/")[0]
    d = share_links.lookup(sid)
    return (sid, d) if d is not None and share_links.is_study(d) else None


def keep_corpus(folder: Path, corpus) -> str:
    """Write ``corpus``'s pairs into the study folder (``corpus.tsv``, whitespace inside a sentence made single
    spaces so every line is one pair) and return its path: the corpus spec every run of the study loads."""
    lines = "".join(f"{' '.join(str(a).split())}\t{' '.join(str(b).split())}\n" for a, b in corpus.pairs)
    path = Path(folder) / CORPUS_FILE
    atomic_write(path, lines)
    return str(path.resolve())


def begin(study: Study, seeds: int, steps: int, corpus=None) -> tuple[Path | None, str | None]:
    """A new study folder in this workspace with ``study``'s plan (``corpus``: None for the built-in corpus, else a
    Corpus kept in the folder), started in the Lab slot: (folder, None), or (None, the message) with nothing left
    on disk. Bad settings raise BertcoreError before any folder is made."""
    old = live()
    if old is not None and old.running:
        return None, tr("A study is already running here; stop it first.")
    runs.check_capacity(workspace.workspace_path(), new_runs=1)
    folder = new_folder(study.name)
    try:
        spec = "builtin" if corpus is None else keep_corpus(folder, corpus)
        plan = S.plan(study, folder, seeds, steps, spec)
        S.write_study(plan, "stopped", "not started yet")  # one entry of the run list from the first moment
        err = start(plan)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if err:
        shutil.rmtree(folder, ignore_errors=True)
        return None, err
    return folder, None


def resume(folder: Path) -> str | None:
    """Start again: the study in ``folder`` finishes only what is missing (its scored runs stay as they are)."""
    return start(S.open_study(folder))


def delete(folder: Path) -> None:
    """Delete a study folder of this workspace with its runs and its read-only link; refused while it runs."""
    run = live()
    if run is not None and run.running and _same(run.out_dir, folder):
        raise InputError(tr("This study is running; stop it first, then delete it."))
    share_links.revoke(workspace.workspace_id(), Path(folder).name)
    runs.delete_run(folder, root=workspace.workspace_path())
    if run is not None and _same(run.out_dir, folder):
        forget()
    active = str(st.session_state.get(workspace.ACTIVE_KEY) or "")
    if active.startswith("dir:") and Path(active[len("dir:"):]).resolve().is_relative_to(Path(folder).resolve()):
        workspace.remember_active("untrained")  # one of its runs was the active model


def open_shared_run(share_id: str, name: str) -> None:
    """Make run ``name`` of the shared study the active model of this session only (the viewer's workspace is not
    written, as with any read-only link); BertcoreError (share_links.DEAD) when the link or the name opens nothing."""
    key = f"share:{share_id}/{name}"
    workspace.resolve_model(key)
    st.session_state[workspace.ACTIVE_KEY] = key


def view(folder: Path) -> tuple[dict | None, StudySnapshot | None]:
    """(the study's data, the live snapshot or None): the live study of this workspace when it is this folder's
    (polling it is its heartbeat), else study.json as the disk holds it (None when missing or damaged)."""
    run = live()
    if run is not None and _same(run.out_dir, folder):
        s = run.snapshot()
        return s.data, s
    return S.read_study(folder), None


def is_live(folder: Path) -> bool:
    """Whether this workspace's live study in this process is ``folder``'s and still running."""
    run = live()
    return run is not None and run.running and _same(run.out_dir, folder)
