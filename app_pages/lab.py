"""Lab: rerun the BERT paper's ablation tables over seeds, with the spread of every number and a paired test."""
from dataclasses import fields
from pathlib import Path

import pandas as pd
import streamlit as st

from bertcore.config import BertConfig, TrainConfig
from bertcore.launch import service
from bertcore.launch import study as S
from bertcore.lab import table as T
from bertcore.lab.studies import MAX_SEEDS, STUDIES, STUDY_STEPS, custom_study, slug, study_from_dict
from bertcore.training.job import LIVE
from explorer.export import plotly_config
from explorer.figures import lab as fl
from explorer.launch import training_run
from explorer.launch.training_slots import max_trainings
from explorer.session import corpus_state, state
from explorer.launch import studies
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import user_action

PARAM = "study"  # ?study=<folder id>: the study shown (kept in the URL like the Fine-tune page's ?ft=)
_WANT = "lab_want"  # a folder id the next run shows (a new study)
_WRITTEN = "lab_study_written"  # the ?study= value this session wrote last (a different one is a new link)
_SHOW = "lab_show"
CUSTOM = "custom"
# Every Train-page switch a custom study may vary (seed and steps are the study's own, the vocabulary the corpus's)
KEYS = sorted({f.name for f in fields(BertConfig)} | {f.name for f in fields(TrainConfig)}
              - {"seed", "steps", "vocab_size"})
_BUILTIN, _UPLOAD = mark("the built-in corpus"), mark("your uploaded corpus")
_SAID = {"finished": mark("finished"), "stopped": mark("stopped"), "failed": mark("failed"),
         "running": mark("running"), "preparing": mark("preparing"), "abandoned": mark("abandoned"),
         "error": mark("error")}
_STEP_MAX = 20_000


def _text(value) -> str:
    """A text bertcore keeps in study.json (a title, a source, a note), in the session's language where the catalogue
    has it; nothing for none."""
    return tr(str(value)) if value else ""


def _said(status) -> str:
    return tr(_SAID.get(status, str(status)))


def _settings(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or tr("the base configuration")


def _describe(study) -> None:
    """A study's title, source, what the paper found and measured, and its variants with their settings."""
    st.markdown(f"**{tr(study.title)}** · {tr(study.source)}")
    if study.found:
        st.markdown(tr("**The paper found:** {found}", found=tr(study.found)))
    if study.paper_note:
        st.caption(tr("What the paper measured: {note}", note=tr(study.paper_note)))
    rows = [{tr("variant"): v.name + (" " + tr("(reference)") if v.name == study.reference else ""),
             tr("settings"): _settings(v.settings),
             **{tr("paper: {column}", column=c): f"{v.paper[c]:g}" if c in v.paper else "" for c in study.paper_columns}}
            for v in study.variants]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="lab_variants")


def _custom(disabled: bool):
    """The custom study's form: (Study or None, corpus or None for the built-in one)."""
    c1, c2 = st.columns([1, 2])
    key = c1.selectbox(tr("setting to vary"), KEYS, KEYS.index("mlm_probability"), key="lab_vary_key",
                       disabled=disabled)
    default = getattr(BertConfig(), key, None) if key in BertConfig.__dataclass_fields__ else getattr(TrainConfig(),
                                                                                                       key, None)
    values = c2.text_input(tr("values, separated by commas (the first is the reference)"), "0.15, 0.4",
                           key="lab_vary_values", disabled=disabled,
                           help=tr("Any value the Train page accepts for this setting; its default is {default}.",
                                   default=default))
    c3, c4 = st.columns(2)
    tok = c3.radio(tr("vocabulary"), ["word", "wordpiece"], key="lab_vary_tok", horizontal=True, disabled=disabled)
    up = corpus_state.uploaded()
    options = [_BUILTIN] + ([_UPLOAD] if up is not None else [])
    which = c4.radio(tr("corpus"), options, key="lab_vary_corpus", horizontal=True, disabled=disabled,
                     format_func=frozen(), help=tr("Upload a corpus on the Data & tokens page to study it here."))
    corpus = up.corpus if which == _UPLOAD and up is not None else None
    if corpus is not None:
        st.caption(tr("{name}: {n} sentence pairs, kept in the study's folder.", name=corpus.name,
                      n=len(corpus.pairs)))
    with user_action("Check the custom study") as act:
        study = custom_study(f"{key}={values}", {}, tok)
    if act.failed:
        return None, None
    st.dataframe(pd.DataFrame([{tr("variant"): v.name + (" " + tr("(reference)") if v.name == study.reference
                                                         else ""), tr("settings"): _settings(v.settings)}
                               for v in study.variants]), hide_index=True, key="lab_custom_variants")
    return study, corpus


def _form(running: bool) -> None:
    """Pick a study (a named one or a custom one), the seeds and the steps, and Start."""
    names = [*STUDIES, CUSTOM]
    with st.container(key="lab_form"):
        name = st.selectbox(tr("study"), names, key="lab_study_name", disabled=running,
                            format_func=frozen(lambda n: tr("custom: any switch of the Train page") if n == CUSTOM
                                               else f"{n}: {tr(STUDIES[n].title)}"))
        study, corpus = _custom(running) if name == CUSTOM else (STUDIES[name], None)
        if name != CUSTOM:
            _describe(study)
        c1, c2 = st.columns(2)
        seeds = c1.slider(tr("seeds per variant"), 1, MAX_SEEDS, 3, key="lab_seeds", disabled=running,
                          help=tr("Every variant of one seed starts from the same initial weights and sees the same "
                                  "pairs in the same order, so the runs of one seed are the pairs of the paired test."))
        steps = int(c2.number_input(tr("pretraining steps per run"), 10, _STEP_MAX, STUDY_STEPS, 10, key="lab_steps",
                                    disabled=running))
        if study is not None:
            n = len(study.variants) * seeds
            lanes = min(max_trainings(), n)
            st.caption(tr("{v} variants × {s} seeds = {runs} runs of {steps} steps, trained one after the other and "
                          "each scored when it ends (`bertcore.launch.study.run`).", v=len(study.variants), s=seeds,
                          runs=n, steps=steps) if lanes == 1 else
                       tr("{v} variants × {s} seeds = {runs} runs of {steps} steps, trained side by side in up to {n} "
                          "training processes and each scored when it ends (`bertcore.launch.study.run`).",
                          v=len(study.variants), s=seeds, runs=n, steps=steps, n=lanes))
        if running:
            st.info(tr("A study is running in this workspace; stop it (above) to start another."))
        if st.button(tr("Start"), key="lab_start", type="primary", disabled=running or study is None):
            with user_action("Start the study"):
                for v in study.variants:  # the server's memory budget, before anything is made
                    service.check_budget(*study.configs(v, 0, steps))
                folder, err = studies.begin(study, seeds, steps, corpus)
                if err:
                    st.error(err)
                else:
                    st.session_state[_WANT] = folder.name
                    st.rerun()


def _pick(run) -> Path | None:
    """The workspace's studies to switch between (``?study=`` picks one), and Delete; the folder shown."""
    kept = studies.workspace_studies()
    url = st.query_params.get(PARAM)
    new_link = bool(url) and url != st.session_state.get(_WRITTEN)
    if not kept:
        if new_link:
            st.warning(tr("The study of this link is not in this workspace (it was deleted, or the link belongs to "
                          "another workspace)."))
        return None
    by_id = {r.id: r for r in kept}
    live_id = Path(run.out_dir).name if run is not None else None
    want = st.session_state.pop(_WANT, None) or (url if new_link else None)
    if want in by_id:
        st.session_state[_SHOW] = want
    elif new_link and want == url:
        st.warning(tr("The study of this link is not in this workspace (it was deleted, or the link belongs to "
                      "another workspace)."))
    if st.session_state.get(_SHOW) not in by_id:
        st.session_state[_SHOW] = live_id if live_id in by_id else kept[0].id
    st.subheader(tr("Studies in this workspace"))
    # the labels stay as they are while a study runs (a selectbox keeps showing the label it was drawn with)
    pick = st.selectbox(tr("show"), list(by_id), key=_SHOW,
                        format_func=lambda i: f"{by_id[i].name} · {by_id[i].created.replace('T', ' ').rstrip('Z')}")
    st.query_params[PARAM] = pick
    st.session_state[_WRITTEN] = pick
    folder = by_id[pick].path
    with st.expander(tr("Delete this study")):
        sure = st.checkbox(tr("Yes, delete this study and all its runs for good"), key=f"lab_sure_{pick}")
        if st.button(tr("Delete"), key="lab_delete", disabled=not sure or studies.is_live(folder)):
            with user_action("Delete the study"):
                studies.delete(folder)
                st.query_params.pop(PARAM, None)
                st.session_state.pop(_SHOW, None)
                st.session_state.pop(_WRITTEN, None)
                st.rerun()
    return folder


def _rebase(data: dict, folder: Path) -> None:
    """Each run's folder below this study's ``runs/`` (study.json keeps absolute paths; the folder may have moved)."""
    for v in data.get("variants") or []:
        for r in v.get("runs") or []:
            r["dir"] = str(folder / S.RUNS_DIR / Path(str(r.get("dir") or "")).name)


def _progress(data: dict, snap) -> None:
    """Runs scored of total, which runs train now (with their step), and why a study stopped."""
    done, total = int(data.get("done") or 0), int(data.get("total") or 0)
    status = snap.status if snap is not None else data.get("status")
    text = tr("{status}: {done} of {total} runs scored", status=_said(status), done=done, total=total)
    if snap is not None:
        done, total = snap.done, snap.total
        text = tr("{status}: {done} of {total} runs scored · elapsed {elapsed}", status=_said(status), done=done,
                  total=total, elapsed=training_run.fmt_seconds(snap.elapsed))
    st.progress(done / total if total else 0.0, text=text)
    if snap is not None:
        now = []
        for (variant, seed), cell in snap.states.items():
            if cell == "training":
                h = snap.histories.get((variant, seed))
                at = h.last_step if h is not None and len(h) else 0
                now.append(tr("{variant} · seed {seed} (step {step}/{steps})", variant=variant, seed=seed, step=at,
                              steps=data.get("steps")))
            elif cell == "evaluating":
                now.append(tr("{variant} · seed {seed} (scoring)", variant=variant, seed=seed))
        if now:
            st.caption(tr("Training now: {runs}", runs="; ".join(now)))
        if snap.message:
            st.error(tr(snap.message))
    if data.get("reason") and status not in LIVE and (snap is None or not snap.running):
        st.warning(tr("Stopped part-way: {reason}", reason=tr(data["reason"])) if data.get("status") == "stopped"
                   else tr("{status}: {reason}", status=_said(data.get("status")), reason=tr(data["reason"])))


def _table(data: dict) -> None:
    head, rows = fl.table_rows(data)
    helps = fl.metric_help(data)
    with st.container(key="lab_table"):  # a plain table: every cell in view, and in the page's text
        st.table(pd.DataFrame(rows, columns=head), hide_index=True)
    corpus = tr(_BUILTIN) if data.get("corpus") in (None, "builtin") else tr(_UPLOAD)
    n = int(data.get("seeds") or 0)
    values = dict(steps=data.get("steps"), corpus=corpus, reference=data.get("reference"), test=tr(T.TEST),
                  pairs=T.MIN_PAIRS)
    st.caption(tr("Ours: one seed of {steps} steps on {corpus}, so no spread; ▲/▼ need at least {pairs} seeds (a "
                  "{test} against “{reference}”); n/a: the metric does not apply to that variant.", **values) if n == 1
               else tr("Ours: mean ± sd over {n} seeds of {steps} steps each on {corpus}; ▲/▼: differs from "
                       "“{reference}” by a {test} (with fewer than {pairs} seeds nothing is marked); n/a: the metric "
                       "does not apply to that variant.", n=n, **values))
    if data.get("paper_columns"):
        st.caption(tr("Paper columns ({source}): {note}", source=_text(data.get("source")),
                      note=_text(data.get("paper_note"))))
    with st.expander(tr("What each column measures")):
        st.markdown("\n".join(f"- **{label}**: {what}" for label, what in helps.items()) or tr("No run is scored yet."))


def _curves(data: dict) -> None:
    """The held-out curves, mean over seeds (read from the scored runs' history.csv, once per new score)."""
    scored = tuple((v["name"], r["dir"]) for v in data.get("variants") or [] for r in v.get("runs") or []
                   if r.get("metrics"))
    memo = st.session_state.get("lab_curves_memo")
    if memo is None or memo[0] != scored:
        memo = (scored, {c: T.mean_curves(data, c) for c in fl.curve_columns(data)})
        st.session_state["lab_curves_memo"] = memo
    curves = memo[1]
    if not any(curves.values()):
        st.caption(tr("The held-out curves appear here once the first run is scored."))
        return
    st.plotly_chart(fl.curves_figure(curves, tr("{title}: held-out curves (mean over seeds)",
                                                title=_text(data.get("title")))),
                    key="lab_curves", config=plotly_config(f"lab-{data.get('name')}-curves", "svg"))
    if any(v.get("settings", {}).get("attention_direction") == "left_to_right" for v in data.get("variants") or []):
        st.caption(tr("A left-to-right model's MLM curve is its next-token accuracy (it has no [MASK] to fill)."))


def _runs(data: dict, folder: Path, snap, share_id: str | None) -> None:
    """Every run of the study, and a button that makes one the active model of every page."""
    st.markdown("**" + tr("Every run of the study") + "**")
    st.dataframe(pd.DataFrame(fl.run_rows(data, snap.states if snap is not None else None)), hide_index=True,
                 key="lab_runs")
    ready = [(v["name"], int(r["seed"]), Path(r["dir"]).name) for v in data.get("variants") or []
             for r in v.get("runs") or [] if r.get("metrics") and (Path(r["dir"]) / "model.safetensors").is_file()]
    if not ready:
        return
    c1, c2, c3 = st.columns([3, 1, 2], vertical_alignment="bottom")
    names = {n: f"{v} · seed {s}" for v, s, n in ready}
    pick = c1.selectbox(tr("run"), list(names), key="lab_run", format_func=names.get)
    if c2.button(tr("Open"), key="lab_open", help=tr("Make this run the active model of every page")):
        if share_id is not None:
            with user_action("Open the run") as act:
                studies.open_shared_run(share_id, pick)
            if not act.failed:
                st.rerun()
            return
        err = state.select_active(f"dir:{(folder / S.RUNS_DIR / pick).resolve()}")
        if err:
            st.error(err)
        else:
            st.rerun()
    c3.page_link("app_pages/attention.py", label=tr("Look at it on the Attention page"), icon=":material/grid_on:")


def _controls(folder: Path, head: dict, live: bool) -> None:
    """Stop (a study running here), or Start again (one that stopped part-way): only what is missing is trained."""
    if live:
        run = studies.live()
        stopping = run.stop_signal.is_set()
        if st.button(tr("Stop"), key="lab_stop", disabled=stopping,
                     help=tr("The runs under way stop with a resumable checkpoint; Finish the study trains the rest.")):
            run.stop()  # "stopped by the user", kept untranslated in study.json (shown through tr)
            st.rerun()
        if stopping:
            st.caption(tr("Stopping: the runs under way save a checkpoint to resume from…"))
        return
    if head.get("status") != "running" and int(head.get("done") or 0) < int(head.get("total") or 0):
        if st.button(tr("Finish the study"), key="lab_restart", type="primary", disabled=studies.running(),
                     help=tr("Trains only the runs that are missing, resumes the ones stopped part-way, and leaves "
                             "the scored ones as they are.")):
            with user_action("Start the study again"):
                err = studies.resume(folder)
                if err:
                    st.error(err)
                else:
                    st.rerun()


def _show(folder: Path, share_id: str | None = None) -> None:
    """One study: its controls, progress, the table with the paper's columns, the curves, the CSV and every run; a
    live study of this workspace redraws every second (the snapshot is its heartbeat), one running elsewhere every
    3 s (from the disk)."""
    head = S.read_study(folder)
    if head is None:
        st.warning(tr("This folder holds no readable study.json; delete it."))
        return
    live = studies.is_live(folder) if share_id is None else False
    elsewhere = not live and head.get("status") == "running"
    st.subheader(f"{_text(head.get('title'))} ({head.get('name')})")
    st.caption(_text(head.get("source")))
    if share_id is None:
        _controls(folder, head, live)

    @st.fragment(run_every=1.0 if live else 3.0 if elsewhere else None)
    @user_action("Show the study")
    def show():
        data, snap = studies.view(folder) if share_id is None else (S.read_study(folder), None)
        if data is None:
            return
        _rebase(data, folder)
        _progress(data, snap)
        _table(data)
        st.download_button(tr("Download the table (CSV)"), T.to_csv(data, study_from_dict(data)),
                           file_name=f"{slug(str(data.get('name')))}-table.csv", mime="text/csv", key="lab_csv",
                           on_click="ignore")
        _curves(data)
        _runs(data, folder, snap, share_id)
        if (live and not (snap is not None and snap.running)) or (elsewhere and data.get("status") != "running"):
            st.rerun()  # it ended: the full page again (timer off, Start again offered)

    show()


def render() -> None:
    st.title(tr("Lab: rerun the paper's ablations"))
    st.markdown(tr(
        "BERT's ablations (§5.1, Table 5; Appendix C.2, Table 8) and those of its successors were each one run of a "
        "large model. Here every variant of a study is trained over several seeds, the runs of one seed from the "
        "same initial weights and the same data order (`bertcore.launch.study.run`), every run is scored the same way "
        "(`bertcore.lab.evaluate.evaluate_run`), and the table gives each number as mean ± sd over the seeds, "
        "marked where a paired test finds a difference from the reference (`bertcore.lab.table.summarise`)."))
    state.get_active()
    shared = studies.shared_study()
    if shared is not None:
        st.info(tr("**Read-only link.** You see this study's table, curves and runs; open any of its runs on the "
                   "other pages. Nothing can be started, stopped or deleted here."))
        _show(shared[1], share_id=shared[0])
        return
    if state.read_only():
        st.info(tr(state.READ_ONLY))
        return
    run = studies.live()
    folder = _pick(run)
    if folder is not None:
        _show(folder)
    with st.expander(tr("New study: a table of the paper, or any switch of the Train page"), expanded=folder is None):
        _form(run is not None and run.running)


render()
