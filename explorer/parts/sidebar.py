"""The sidebar drawn by app.py on every page: active model, live training status, model switcher, and the
workspace's runs (switch, resume, rename, download, share a read-only link, delete) in a compact expander. A study
(run.json kind "study", bertcore.launch.study) is one entry there: open it in the Lab, rename, share, delete; its runs
live inside its folder and are listed by the Lab only.

A session that shows a run by a read-only link (``?share=``, explorer.session.share_links) gets instead one block with
"Copy into my workspace": no run list, no folder box. The folder box appears only where the server's folder
policy offers folders (explorer.session.folder_access)."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import streamlit as st

from bertcore.errors import BertcoreError
from bertcore.model.bert import count_parameters
from bertcore.training import runs
from explorer.launch import finetunes, training_run
from explorer import i18n
from explorer.session import share_links, state, workspace
from explorer.launch import launcher
from explorer.launch import studies
from explorer.i18n import mark, tr
from explorer.page_errors import error_text, user_action

MINILM_LABEL = workspace.MINILM_LABEL
_K_MSG = "sb_message"
SIDEBAR_POLL_SECONDS = 2.0
_STATUS_WORDS = (mark("finished"), mark("stopped"), mark("abandoned"), mark("error"))  # tr(status) on screen


def param_count(model) -> int:
    try:
        parts = count_parameters(model)
        return int(parts.get("total", sum(parts.values())))
    except Exception:  # noqa: BLE001
        return int(sum(p.numel() for p in model.parameters()))


# The background studies a page may have started (explorer.launch.studies): slot -> what the sidebar calls it
STUDY_SLOTS = ((studies.LAB_SLOT, mark("study")), ("bx_compare_run", mark("compare designs")),
               (finetunes.SLOT, mark("fine-tune (both models)")), (finetunes.SWEEP_SLOT, mark("label sweep")))


def _live_studies() -> list:
    return [(label, run) for slot, label in STUDY_SLOTS if (run := studies.live(slot)) is not None]


@user_action("Show the training status")
def _status_block() -> None:
    main_run = launcher.get_run()
    running = (main_run is not None and main_run.running) or any(r.running for _, r in _live_studies())

    # Every 2 s: the Train and Fine-tune pages draw their own progress every second, and each tick of this
    # fragment takes the GIL from the training thread in the same process (the heartbeat needs < 10 s).
    @st.fragment(run_every=SIDEBAR_POLL_SECONDS if running else None)
    def _status():
        # Polling snapshot() is also the heartbeat that keeps a training (or a study) alive on every page.
        live = []
        main = launcher.get_run()
        if main is not None and main.running:
            live.append(main)
            s = main.snapshot()
            st.progress(s.progress, text=tr("{label}: step {done}/{total}, ETA {eta}", label=tr("training"),
                                            done=s.total_done, total=s.total_steps,
                                            eta=training_run.fmt_seconds(s.eta)))
        for label, run in _live_studies():
            if not run.running:
                continue
            live.append(run)
            d = run.snapshot()
            st.progress(d.progress, text=tr("{what}: {done} of {total} runs done, ETA {eta}", what=tr(label),
                                            done=d.done, total=d.total, eta=training_run.fmt_seconds(d.eta)))
        if running and not live:  # a run ended since this fragment started ticking: rerun the app
            launcher.adopt_finished_runs()
            st.rerun()
        if not live:
            if main is not None and main.status in ("finished", "stopped", "abandoned", "error"):
                s = main.snapshot()
                if s.message:
                    # tr's own first parameter is called message: fill this field after translating
                    st.caption(tr("Last training: {message}").format(message=s.message))
                else:
                    st.caption(tr("Last training: {status} after {steps} steps.", status=tr(s.status),
                                  steps=s.total_done))
            else:
                st.caption(tr("No training running."))

    _status()


def _say(kind: str, text: str) -> None:
    st.session_state[_K_MSG] = (kind, text)


@user_action("Switch the model")
def _switcher(active) -> None:
    choices = workspace.list_models()
    labels = list(choices)
    if active.label not in labels:
        labels.insert(0, active.label)
    choice = st.selectbox(tr("Switch model"), labels, index=labels.index(active.label),
                          help=tr("Fresh untrained (shared), this workspace's runs (trained, uploaded), a pretrained "
                                  "BERT, or a folder opened below."))
    if choice != active.label:
        err = state.select_active(choice)
        if err:
            _say("error", err)
        st.rerun()


@user_action("Manage the runs")
def _run_manager() -> None:
    infos = workspace.workspace_runs()
    with st.expander(tr("Runs in this workspace ({n})", n=len(infos))):
        if not infos:
            st.caption(tr("No runs yet: train on the Train page. Runs are kept on the server's disk."))
        else:
            by_id = {r.id: r for r in infos}
            rid = st.selectbox(tr("Run"), list(by_id), key="sb_run",
                               format_func=lambda i: f"{by_id[i].name} — {by_id[i].summary()}")
            info = by_id[rid]
            st.caption(f"{info.summary()}" + (f" · {info.reason}" if info.reason and not info.damaged else "")
                       + f" · {info.size_bytes / 2**20:.1f} MB")
            _run_actions(info)
        st.caption(tr("Bookmark this page's link (it ends with ?ws=…): it is your workspace. "
                      "Anyone with the link sees its runs."))


def _study_actions(info) -> None:
    """A study's entry: open it in the Lab, rename, share, delete (not while it runs); no Use or Resume (the Lab's
    Start again finishes it)."""
    st.page_link("app_pages/lab.py", label=tr("Open in the Lab"), icon=":material/science:",
                 query_params={"study": info.id})
    if info.damaged:
        return
    _rename(info)
    _share_controls(info)


def _rename(info) -> None:
    """The run's name field and its Rename button."""
    new = st.text_input(tr("Name"), value=info.name, key=f"sb_run_name_{info.id}", max_chars=runs.MAX_NAME_LEN)
    if new != info.name and st.button(tr("Rename"), key="sb_run_rename"):
        try:
            runs.rename_run(info.path, new)
        except BertcoreError as e:
            _say("error", error_text(e))
        st.rerun()


def _run_actions(info) -> None:
    if info.kind == "study":
        _study_actions(info)
        _delete(info)
        return
    c1, c2 = st.columns(2)
    if info.loadable and not info.live and c1.button(tr("Use"), key="sb_run_use",
                                                             help=tr("Make it the active model")):
        err = state.select_active(f"run:{info.id}")
        if err:
            _say("error", err)
        st.rerun()
    if info.resumable and c2.button(tr("Resume"), key="sb_run_resume",
                                                    help=tr("Continue from step {step}", step=info.steps_done)):
        err = launcher.resume_run(info.id)
        _say(*(("error", err) if err else ("success", tr("Resuming “{name}” from step {step}.", name=info.name,
                                                                 step=info.steps_done))))
        st.rerun()
    if not info.damaged:
        _rename(info)
        _share_controls(info)
        if st.button(tr("Prepare zip"), key="sb_run_zip", help=tr("A zip of the run folder (a checkpoint)")):
            st.session_state["sb_zip"] = (info.id, runs.zip_run(info.path))
        z = st.session_state.get("sb_zip")
        if z is not None and z[0] == info.id:
            st.download_button(tr("Download .zip"), z[1], file_name=f"{info.id}.zip", mime="application/zip",
                               key="sb_run_dl", on_click="ignore")
    _delete(info)


def _inside(path: str, folder) -> bool:
    try:
        return Path(path).resolve().is_relative_to(Path(folder).resolve())
    except (OSError, ValueError):
        return False


def _delete(info) -> None:
    if info.live:
        return
    sure = st.checkbox(tr("Yes, delete this run for good") if info.kind != "study" else
                       tr("Yes, delete this study and all its runs for good"), key=f"sb_run_sure_{info.id}")
    if st.button(tr("Delete"), key="sb_run_delete", disabled=not sure):
        try:
            state.revoke_share(info.id)  # its read-only link goes with it
            runs.delete_run(info.path, root=workspace.workspace_path())
        except BertcoreError as e:
            _say("error", error_text(e))
        else:
            _say("success", tr("Deleted “{name}”.", name=info.name))
            active = str(st.session_state.get("bx_active") or "")
            inside = active.startswith("dir:") and _inside(active[len("dir:"):], info.path)
            if active == f"run:{info.id}" or inside:  # the run, or one of the study's runs
                state.select_active("untrained")
        st.rerun()


def share_url(share_id: str, page: str | None = None) -> str:
    """The link that opens ``share_id`` on this server: the page's own address (st.context.url) with ?share=; with
    ``page`` (a url_path, e.g. "lab" for a study) that page of the app, below the server's base path."""
    try:
        base = st.context.url or ""
    except Exception:  # noqa: BLE001 - no browser (AppTest)
        base = ""
    if page is not None:
        u = urlsplit(base)
        root = str(st.get_option("server.baseUrlPath") or "").strip("/")
        base = (f"{u.scheme}://{u.netloc}/" if u.netloc else "") + (f"{root}/" if root else "") + page
    return f"{base}?{workspace.SHARE_PARAM}={share_id}"


def _share_controls(info) -> None:
    """The owner's read-only link to one run (finished or stopped) or one study (any status): make it, show it,
    revoke it. A study's link opens the Lab page."""
    study = info.kind == "study"
    if (not study and (not info.loadable or info.live)) or info.damaged:
        return
    sid = share_links.share_of(workspace.workspace_id(), info.id)
    if sid is None:
        if st.button(tr("Share a read-only link"), key="sb_run_share",
                     help=tr("A link of its own that shows this run only: it cannot delete, rename or train it, "
                             "and shows none of your other runs. You can revoke it.")):
            err = state.share_run(info.id)
            if err:
                _say("error", err)
            st.rerun()
        return
    if study:
        st.caption(tr("Read-only link to this study (anyone with it sees its table, curves and runs, nothing more):"))
    else:
        st.caption(tr("Read-only link to this run (anyone with it can look at it and copy it, nothing more):"))
    st.code(share_url(sid, "lab" if study else None), language=None)
    if st.button(tr("Revoke the link"), key="sb_run_revoke"):
        state.revoke_share(info.id)
        _say("success", tr("The link to “{name}” is revoked: it opens nothing now.", name=info.name))
        st.rerun()


@user_action("Use the read-only link")
def _shared_block(active) -> None:
    st.info(tr("**Read-only link.** You see “{name}” on every page; it cannot be trained, renamed or deleted here, "
               "and no other run of its owner is shown.", name=active.label))
    shown = studies.shared_study()
    if shown is not None:
        st.page_link("app_pages/lab.py", label=tr("The shared study in the Lab"), icon=":material/science:")
        if not active.is_trained:
            return  # no run of the study is open yet: nothing to copy
    if st.button(tr("Copy into my workspace"), key="sb_share_copy",
                 help=tr("A copy of your own, in your workspace: train, rename or delete it there.")):
        err = state.copy_shared()
        _say(*(("error", err) if err else ("success", tr("Copied: the copy is now the active model."))))
        st.rerun()


@user_action("Open a local folder")
def _open_folder() -> None:
    if not workspace.folder_policy().shows_box:
        return  # a shared server that offers no folders (BERTCORE_OPEN_ROOTS unset or empty): no box at all
    with st.expander(tr("Open a local folder")):
        path = st.text_input(tr("bertcore run / checkpoint folder, or a transformers BERT folder"), key="sb_hf_path",
                             placeholder=tr("/path/to/run (config.json + model.safetensors + vocab.txt)"))
        if st.button(tr("Open"), key="sb_hf_import"):
            err = state.open_folder(path)
            _say(*(("error", err) if err else ("success", tr("Opened {path}.", path=path.strip()))))
            st.rerun()


def render_sidebar() -> None:
    with st.sidebar:
        i18n.language_switch()
        with user_action("Load the active model") as act:
            active = state.get_active()
        if act.failed:
            return
        note = st.session_state.pop(workspace.WS_NOTE_KEY, None)
        if note:
            st.warning(note)
        st.markdown(tr("**Active model:** {label}", label=active.label))
        kind = {"untrained": tr("random weights"), "trained": tr("trained here"), "uploaded": tr("uploaded checkpoint"),
                "pretrained": tr("imported pretrained")}.get(active.kind, active.kind)
        st.caption(tr("{n} parameters · {kind}", n=f"{param_count(active.model):,}", kind=kind))
        if not getattr(active.model, "has_mlm_head", True) or not getattr(active.model, "has_nsp_head", True):
            st.caption(tr("This model has no trained MLM/NSP head: fill-mask / NSP are not meaningful."))
        _status_block()
        _switcher(active)
        if state.read_only():
            _shared_block(active)
        else:
            _run_manager()
            _open_folder()
        msg = st.session_state.pop(_K_MSG, None)
        if msg:
            (st.error if msg[0] == "error" else st.success)(msg[1])
        st.page_link("app_pages/train.py", label=tr("Train a model"), icon=":material/model_training:")
