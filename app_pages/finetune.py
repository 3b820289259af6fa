"""Fine-tune: fine-tune a pretrained encoder and the same architecture from random weights, and see what pretraining buys."""
from pathlib import Path

import streamlit as st

from bertcore.data.tasks import load_task_csv, task_names
from bertcore.errors import BertcoreError
from bertcore.finetune.models import MINILM_LR, PRETRAINED, SCRATCH, classify, summary_line
from bertcore.finetune.sweep import DEFAULT_POINTS, SWEEP_STEPS, planned_points, sweep_points
from bertcore.finetune.tuner import FinetuneConfig
from bertcore.launch.study import read_study
from bertcore.training.history import History
from explorer.figures import finetune as ff
from explorer.launch import finetunes, training_run
from explorer import livechart
from explorer.session import page_caches, state, workspace
from explorer.parts import run_status
from bertcore.data.user_text import is_blank
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import error_text, user_action
from explorer.parts.run_status import STATUS_LABELS

LABEL_CHOICES = [16, 32, 64, 128, 256, 512, 1024, 0]  # 0 = all
STEP_CHOICES = [10, 20, 50, 100, 150, 200, 300, 500]
_UPLOAD = mark("your CSV (upload below)")  # an option value: shown through tr


def _pretrained_choices() -> dict[str, str]:
    """label -> model key (``workspace.list_models``) of every model that can start a fine-tune; loaded only when
    Start is pressed."""
    models = workspace.list_models()
    return {label: key for label, key in models.keys_by_label.items() if key != "untrained"}


def _task(name: str):
    """(Task or None, error or None)."""
    try:
        if name != _UPLOAD:
            return page_caches.finetune_task(name), None
        up = st.session_state.get("finetune_csv")
        if up is None:
            return None, tr("Upload a CSV with the header text,label (or text_a,text_b,label).")
        return load_task_csv(up.getvalue(), name=up.name), None
    except BertcoreError as e:
        return None, tr("This file cannot be used: {error}", error=error_text(e))


def _saved_line(c) -> str:
    if c.damaged:
        return tr("{name} · damaged: {why}", name=c.name, why=c.damaged)
    acc = [c.accuracy(k) for k in (PRETRAINED, SCRATCH)]
    accs = f" · {acc[0]:.0%} vs {acc[1]:.0%}" if None not in acc else ""
    return f"{c.name} · {_status(c.status)}{accs} · {c.created.replace('T', ' ').rstrip('Z')}"


def _status(status: str) -> str:
    return tr(STATUS_LABELS.get(status, status))


def _is_in(run, c) -> bool:
    """Whether the StudyRun ``run`` works in comparison ``c``'s folder (the comparison itself or its sweep)."""
    return run is not None and (Path(run.out_dir) == c.path or c.path in Path(run.out_dir).parents)


def _pick_saved(kept, run):
    """The comparison to show: the one in ``?ft=``, else the live one, else the newest."""
    live_dir = str(run.out_dir) if run is not None else None
    ids = [c.id for c in kept]
    want = st.query_params.get("ft")
    if want not in ids:
        want = next((c.id for c in kept if str(c.path) == live_dir), ids[0])
    with st.expander(tr("Saved fine-tunes ({n}): kept in this workspace, across reloads and restarts", n=len(kept))):
        by_id = {c.id: c for c in kept}
        pick = st.selectbox(tr("Show"), ids, index=ids.index(want), format_func=lambda i: _saved_line(by_id[i]),
                            key="finetune_show")
        chosen = by_id[pick]
        busy = any(_is_in(r, chosen) and r.running for r in (run, finetunes.sweep_run()))
        sure = st.checkbox(tr("Yes, delete this fine-tune for good"), key=f"finetune_sure_{pick}")
        if st.button(tr("Delete"), key="finetune_delete", disabled=not sure or busy):
            with user_action("Delete the fine-tune"):
                finetunes.delete(chosen)
                st.query_params.pop("ft", None)
                st.rerun()
    st.query_params["ft"] = pick
    return by_id[pick]


def _curves(run_id: str, steps: int, histories: dict, chance: float) -> None:
    """Both models' held-out accuracy and training loss in the live chart (explorer.livechart): the browser keeps
    its charts and gets only the rows it lacks (extendTraces), so a redraw every second stays cheap."""
    rows = livechart.pair_rows({k: histories.get(k) or History.finetuning() for k in (PRETRAINED, SCRATCH)})
    livechart.live_panel(run_id, int(steps), rows, [], chance, key="finetune_curves", chart_height=320,
                         charts=ff.live_charts([PRETRAINED, SCRATCH]))


def _run_errors(data: dict) -> list[str]:
    return [f"{v['name']}: {r['error']}" for v in data.get("variants") or [] for r in v.get("runs") or []
            if r.get("error")]


def _live(run, c) -> None:
    """The comparison this server process runs (or ran): both runs' rows as they come (the StudyRun's snapshot)."""
    running = run.running

    @st.fragment(run_every=1.0 if running else None)
    @user_action("Show the fine-tune")
    def live():
        s = run.snapshot()
        hists, used = finetunes.by_label(run, s.histories), finetunes.by_label(run, s.labels_used)
        st.progress(min(1.0, s.step / max(1, s.steps)),
                    text=tr("{status}: step {step}/{steps} of each model · elapsed {elapsed}",
                            status=_status(s.status), step=s.step, steps=s.steps,
                            elapsed=training_run.fmt_seconds(s.elapsed)))
        for problem in ([s.message] if s.message else []) + _run_errors(s.data):
            st.error(problem)
        _curves(f"live-{id(run):x}", s.steps, hists, c.chance)
        acc = {k: hists[k].last_eval().get("eval_accuracy") if k in hists else None for k in (PRETRAINED, SCRATCH)}
        st.markdown("**" + tr(summary_line(acc[PRETRAINED], acc[SCRATCH], used.get(PRETRAINED, c.labels_used),
                                           c.source)) + "**")
        if running and not s.running:
            st.rerun()

    live()


def _show_saved(c) -> None:
    done = tr("step {step}/{steps} of each model", step=c.steps_done, steps=c.steps or "?")
    st.progress(min(1.0, c.steps_done / max(1, c.steps)), text=f"{_status(c.status)}: {done}")
    if c.damaged or c.reason:
        st.warning(f"“{c.name}”: {c.damaged or c.reason}.")
    for problem in _run_errors(c.data or {}):
        st.error(problem)
    rows = sum(len(h) for h in c.histories.values())
    _curves(f"saved-{c.id}-{rows}", max(1, c.steps), c.histories, c.chance)
    st.markdown("**" + tr(summary_line(c.accuracy(PRETRAINED), c.accuracy(SCRATCH), c.labels_used, c.source)) + "**")


def _sweep(c) -> None:
    """The label sweep of comparison ``c`` (a study folder of its own, ``sweep/`` in the comparison's): its curves,
    or a button that runs (or finishes) it in the background."""
    st.subheader(tr("Label sweep: where pretraining matters most"))
    pts = ", ".join(str(p or tr("all")) for p in DEFAULT_POINTS)
    where = c.path / finetunes.SWEEP_DIR
    sweep = finetunes.sweep_run()
    mine = sweep is not None and Path(sweep.out_dir) == where
    running = mine and sweep.running

    @st.fragment(run_every=1.0 if running else None)
    @user_action("Show the label sweep")
    def show():
        data = sweep.snapshot().data if mine else read_study(where)
        if data is None:
            st.caption(tr("Fine-tunes both starting points again with {pts} labelled examples ({steps} steps each, "
                          "held-out accuracy at the end) and plots the final accuracy against the number of labels "
                          "(`bertcore.lab.studies.finetune_study`, run by `bertcore.launch.study`).", pts=pts,
                          steps=SWEEP_STEPS))
            return
        done, planned = sweep_points(data), planned_points(data)
        status = data.get("status")
        if running:
            st.progress(len(done) / max(1, len(planned)), text=tr("sweeping: {done} of {n} points", done=len(done),
                                                                  n=len(planned)))
        elif data.get("reason"):
            (st.error if status == "failed" else st.warning)(tr("Sweep {status}: {reason}", status=_status(status),
                                                                  reason=data["reason"]))
        if done:
            st.plotly_chart(ff.sweep_figure(done, c.chance, planned=planned), key="finetune_sweep")
            st.caption(tr("{steps} steps per point, seed {seed}; kept in `{path}`.", steps=data.get("steps"),
                          seed=data.get("first_seed", 0), path=where))
        if running and not sweep.running:
            st.rerun()

    show()
    if running:
        if st.button(tr("Stop the sweep"), key="finetune_sweep_stop"):
            sweep.stop()
            sweep.join(2.0)
            st.rerun()
        return
    kept = read_study(where)
    if kept is not None and kept.get("status") == "finished":
        return
    if st.button(tr("Run the label sweep ({pts} labels)", pts=pts), key="finetune_sweep_start",
                 disabled=finetunes.running() or finetunes.sweeping()):
        with user_action("Run the label sweep"):
            err = finetunes.start_sweep(c)
            if err:
                st.error(err)
            else:
                st.rerun()


@user_action("Try the fine-tuned models")
def _try_it(models, tokenizer, labels, pair: bool, task_name: str) -> None:
    st.subheader(tr("Try it"))
    first = page_caches.finetune_task(task_name).held_out[0] if task_name in task_names() else None
    c1, c2 = st.columns(2)
    a = c1.text_input(tr("sentence") if not pair else tr("sentence A"), first.text_a if first else "", key="finetune_text_a")
    b = c2.text_input(tr("sentence B"), (first.text_b or "") if first else "", key="finetune_text_b") if pair else None
    if is_blank(a):  # the library's rule: spaces and invisible characters only
        st.info(tr("Type a sentence to see both models' class probabilities."))
        return
    with user_action("Classify the text") as act:  # classify refuses an empty sentence B with its own message
        probs = {k: classify(m, tokenizer, a, b) for k, m in models.items()}
    if act.failed:
        return
    st.plotly_chart(ff.probabilities_figure(labels, probs), key="finetune_probs")
    st.caption(tr("`bertcore.finetune.tuner.classify`: softmax over the classifier's logits, eval mode."))


@user_action("Show the fine-tunes")
def _view(run, prompt: bool = True) -> None:
    """The comparison picked in the saved list (the live one by default): its curves as they grow while this server
    trains it, else from its folder (after a reload, a restart, or picked from the list); then Try it and the
    sweep."""
    kept = finetunes.saved()
    if not kept:
        if prompt:
            st.info(tr("Pick a pretrained model and a task, then press **Start**."))
        return
    c = _pick_saved(kept, run)
    if run is not None and Path(run.out_dir) == c.path:
        _live(run, c)
        c = finetunes.read_comparison(c.path)  # as it is now: the models are on disk once it ended
    else:
        _show_saved(c)
    st.caption(tr("Saved in `{path}` (both models: `runs/*/`, fine-tune run directories; open one with "
                  "`python -m bertcore classify DIR \"text\"`).", path=c.path))
    if not c.has_models:
        return
    try:
        models, tok = finetunes.open_models(c)
    except (BertcoreError, OSError) as e:
        st.error(tr("The saved models cannot be opened: {error}",
                    error=error_text(e) if isinstance(e, BertcoreError) else e))
        return
    _try_it(models, tok, c.task_labels, c.pair, c.task)
    _sweep(c)


def render() -> None:
    st.title(tr("Fine-tune: what pretraining buys"))
    st.markdown(tr(
        "BERT's point (§4): one pretrained encoder transfers to a new task with few labels. Here a classifier "
        "(`bertcore.model.classification.BertForSequenceClassification`: the pooled [CLS] vector → one linear "
        "layer) is fine-tuned twice with the **same labelled examples, batch order, dropout masks and seed**: once "
        "from the pretrained weights, once from random initial weights of the same architecture. The gap between "
        "the two held-out curves is what pretraining bought."
    ))
    state.get_active()
    run = finetunes.live()
    running = run is not None and run.running
    choices = _pretrained_choices()
    if not choices:
        st.info(tr("No pretrained model yet. Train the default model (the sidebar's active model becomes the "
                   "starting point), or load all-MiniLM-L6-v2 in the sidebar."))
        run_status.default_train_button("finetune_default_train")
        _view(run, prompt=False)
        return
    tasks = task_names() + [_UPLOAD]
    c1, c2 = st.columns(2)
    label = c1.selectbox(tr("Pretrained model"), list(choices), key="finetune_model", disabled=running)
    task_name = c2.selectbox(tr("Task"), tasks, key="finetune_task", disabled=running,
                             format_func=frozen(lambda t: tr(t) if t == _UPLOAD else t))
    if task_name == _UPLOAD:
        st.file_uploader(tr("CSV: text,label or text_a,text_b,label"), type=["csv"], key="finetune_csv",
                         disabled=running)
    task, err = None, None
    with user_action("Read the task"):
        task, err = _task(task_name)
    if err and task is None and st.session_state.get("finetune_csv") is None and task_name == _UPLOAD:
        st.info(err)
    elif err:
        st.error(err)
    elif task is not None:
        st.caption(tr("**{name}**: {description} Classes: {classes}; {train} training examples in the pool, {held} "
                      "held out.", name=task.name, description=task.description,
                      classes=", ".join(tr(label) for label in task.labels), train=len(task.train),
                      held=len(task.held_out)))
    d1, d4, d2, d3 = st.columns([2, 2, 1, 1])
    n = d1.select_slider(tr("labelled examples"), LABEL_CHOICES, 64, key="finetune_labels", disabled=running,
                         format_func=frozen(lambda x: tr("all") if x == 0 else str(x)))
    steps = d4.select_slider(tr("steps"), STEP_CHOICES, 150, key="finetune_steps", disabled=running)
    probe = d2.radio(tr("mode"), [mark("full fine-tuning"), mark("linear probe")], key="finetune_mode",
                     disabled=running, format_func=frozen(),
                     help=tr("Linear probe: the encoder is frozen and only the classifier trains.")) == "linear probe"
    seed = int(d3.number_input(tr("seed"), 0, 2**31 - 1, 0, key="finetune_seed", disabled=running))
    is_minilm = choices.get(label) == "minilm"
    cfg = FinetuneConfig(steps=steps, labels=n, seed=seed, freeze_encoder=probe, lr=MINILM_LR if is_minilm else FinetuneConfig.lr,
                         eval_every=max(1, steps // (6 if is_minilm else 15)))
    b1, b2, _ = st.columns([1, 1, 4])
    if b1.button(tr("Start"), key="finetune_start", type="primary", disabled=running or task is None):
        with user_action("Start the fine-tune"):
            err = finetunes.start(label, task, cfg, st.session_state.get("finetune_csv") if task_name == _UPLOAD
                                  else None)
            if err:
                st.error(err)
            else:
                st.query_params.pop("ft", None)
                st.session_state.pop("finetune_show", None)  # show the new comparison
                st.rerun()
    if b2.button(tr("Stop"), key="finetune_stop", disabled=not running):
        run.stop()
        run.join(2.0)
        st.rerun()
    _view(run)


render()
