"""Fine-tune: fine-tune a pretrained encoder and the same architecture from random weights, and see what pretraining buys."""
import streamlit as st

from bertcore.data.tasks import load_task_csv, task_names
from bertcore.errors import BertcoreError
from bertcore.finetune.comparison import PRETRAINED, SCRATCH, summary_line
from bertcore.finetune.models import MINILM_LR, classify
from bertcore.finetune.sweep import DEFAULT_POINTS, SWEEP_STEPS, read_sweep
from bertcore.finetune.tuner import FinetuneConfig
from explorer.figures import finetune as ff
from explorer.jobs import finetunes, training_run
from explorer import livechart
from explorer.session import page_caches, state, workspace
from bertcore.data.user_text import is_blank
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import error_text, user_action
from explorer.session.state import STATUS_LABELS

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


def _pick_saved(kept, run):
    """The saved comparison to show (None = the live one in memory): newest first, the live one by default."""
    if not kept:
        return None
    live_dir = str(run.out_dir) if run is not None and run.out_dir is not None else None
    ids = [c.id for c in kept]
    want = st.query_params.get("ft")
    if want not in ids:
        want = next((c.id for c in kept if str(c.path) == live_dir), ids[0])
    with st.expander(tr("Saved fine-tunes ({n}): kept in this workspace, across reloads and restarts", n=len(kept))):
        by_id = {c.id: c for c in kept}
        pick = st.selectbox(tr("Show"), ids, index=ids.index(want), format_func=lambda i: _saved_line(by_id[i]),
                            key="finetune_show")
        chosen = by_id[pick]
        sure = st.checkbox(tr("Yes, delete this fine-tune for good"), key=f"finetune_sure_{pick}")
        if st.button(tr("Delete"), key="finetune_delete", disabled=not sure or (str(chosen.path) == live_dir and run.running)):
            with user_action("Delete the fine-tune"):
                finetunes.delete(chosen)
                st.query_params.pop("ft", None)
                st.rerun()
    st.query_params["ft"] = pick
    return None if str(by_id[pick].path) == live_dir else by_id[pick]


def _curves(run_id: str, steps: int, histories: dict, chance: float) -> None:
    """Both models' held-out accuracy and training loss in the live chart (explorer.livechart): the browser keeps
    its charts and gets only the rows it lacks (extendTraces), so a redraw every second stays cheap."""
    rows = livechart.pair_rows({k: histories.get(k) for k in (PRETRAINED, SCRATCH)})
    livechart.live_panel(run_id, int(steps), rows, [], chance, key="finetune_curves", chart_height=320,
                         charts=ff.live_charts([PRETRAINED, SCRATCH]))


def _live(run) -> None:
    running = run.running

    @st.fragment(run_every=1.0 if running else None)
    @user_action("Show the fine-tune")
    def live():
        s = run.snapshot()
        st.progress(s.progress, text=tr("{status}: step {step}/{steps} of each model · elapsed {elapsed}",
                                        status=_status(s.status), step=s.step, steps=s.steps,
                                        elapsed=training_run.fmt_seconds(s.elapsed)))
        if s.message:
            st.error(s.message)
        _curves(f"live-{id(run):x}", s.steps, s.histories, 1 / run.task.num_labels)
        st.markdown("**" + tr(summary_line(s.final_accuracy(PRETRAINED), s.final_accuracy(SCRATCH),
                                           run.labels_used, run.source)) + "**")
        if running and not s.running:
            st.rerun()

    live()


def _show_saved(c) -> None:
    m = c.meta
    done = tr("step {step}/{steps} of each model", step=m.get("steps_done", 0), steps=m.get("steps", "?"))
    st.progress(min(1.0, (m.get("steps_done") or 0) / max(1, m.get("steps") or 1)), text=f"{_status(c.status)}: {done}")
    if c.damaged or c.reason:
        st.warning(f"“{c.name}”: {c.damaged or c.reason}.")
    n_labels = max(2, len(m.get("task_labels") or []))
    rows = sum(len(h) for h in c.histories.values())
    _curves(f"saved-{c.id}-{rows}", int(m.get("steps") or 1), c.histories, 1 / n_labels)
    st.markdown("**" + tr(summary_line(c.accuracy(PRETRAINED), c.accuracy(SCRATCH), int(m.get("labels_used") or 0),
                                       str(m.get("source") or ""))) + "**")
    st.caption(tr("Saved in `{path}` (both models: `pretrained/`, `random-init/`; open one with "
                  "`python -m bertcore classify DIR \"text\"`).", path=c.path))


def _sweep(folder, start_args) -> None:
    """The label sweep of the comparison kept in ``folder``: its curves (kept in sweep.json), or a button that
    runs it in the background. ``start_args()``: (pretrained, tokenizer, task, config, source) or an error."""
    st.subheader(tr("Label sweep: where pretraining matters most"))
    pts = ", ".join(str(p or tr("all")) for p in DEFAULT_POINTS)
    sweep = finetunes.live_sweep()
    mine = sweep is not None and str(sweep.out_dir) == str(folder)
    running = mine and sweep.running

    @st.fragment(run_every=1.0 if running else None)
    @user_action("Show the label sweep")
    def show():
        data = sweep.snapshot() if mine else read_sweep(folder)
        if data is None:
            st.caption(tr("Fine-tunes both starting points again with {pts} labelled examples ({steps} steps each, "
                          "held-out accuracy at the end) and plots the final accuracy against the number of labels "
                          "(`bertcore.finetune.sweep.label_sweep`).", pts=pts, steps=SWEEP_STEPS))
            return
        done, planned = data.get("points") or [], data.get("planned") or []
        status = data.get("status")
        if status == "running":
            st.progress(len(done) / max(1, len(planned)), text=tr("sweeping: {done} of {n} points", done=len(done), n=len(planned)))
        elif data.get("reason"):
            (st.error if status == "failed" else st.warning)(tr("Sweep {status}: {reason}", status=_status(status),
                                                                  reason=data["reason"]))
        if done:
            st.plotly_chart(ff.sweep_figure(done, data.get("chance"), planned=planned), key="finetune_sweep")
            st.caption(tr("{steps} steps per point, seed {seed}; kept in `{path}`.", steps=data.get("steps"),
                          seed=data.get("seed"), path=f"{folder}/sweep.json"))
        if running and not (sweep.running):
            st.rerun()

    show()
    if running:
        if st.button(tr("Stop the sweep"), key="finetune_sweep_stop"):
            sweep.stop()
            sweep.join(2.0)
            st.rerun()
        return
    if st.button(tr("Run the label sweep ({pts} labels)", pts=pts), key="finetune_sweep_start",
                 disabled=finetunes.running() or finetunes.sweeping()):
        with user_action("Run the label sweep"):
            got = start_args()
            err = got if isinstance(got, str) else finetunes.start_sweep(folder, *got)
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
    """The live comparison, or a saved one (after a reload or a restart, or picked from the saved list)."""
    kept = finetunes.saved()
    saved = _pick_saved(kept, run)
    if saved is None and run is None:
        if prompt:
            st.info(tr("Pick a pretrained model and a task, then press **Start**."))
        return
    if saved is None:
        _live(run)
        if not run.running and run.models:
            _try_it(run.models, run.tokenizer, run.task.labels, run.task.pair, run.task.name)
            if run.out_dir is not None and (run.out_dir / "run.json").is_file():
                _sweep(run.out_dir, lambda: (run.pretrained, run.tokenizer, run.task, run.config, run.source))
        return
    _show_saved(saved)
    if saved.has_models:
        try:
            models, tok = finetunes.open_models(saved)
        except (BertcoreError, OSError) as e:
            st.error(tr("The saved models cannot be opened: {error}", error=e))
            return
        m = saved.meta
        _try_it(models, tok, list(m.get("task_labels") or []), bool(m.get("pair")), str(m.get("task") or ""))
        _sweep(saved.path, lambda: _sweep_args(saved))


def _sweep_args(saved):
    """(pretrained, tokenizer, task, config, source) to sweep a saved comparison again, or a message."""
    m = saved.meta
    source, task_name = str(m.get("source") or ""), str(m.get("task") or "")
    if task_name not in task_names():
        return tr("The sweep re-runs the task, and “{task}” was an uploaded CSV that is not kept; start a new "
                  "comparison with the CSV and run the sweep from it.", task=task_name)
    try:
        am = workspace.list_models()[source]
        cfg = FinetuneConfig.from_dict(m.get("finetune_config") or {})
        return am.model, am.tokenizer, page_caches.finetune_task(task_name), cfg, source
    except KeyError:
        return tr("The starting model “{source}” is not loaded in this session; pick it in the sidebar first.",
                  source=source)
    except (BertcoreError, OSError) as e:
        return tr("The sweep cannot start: {error}", error=e)


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
        state.default_train_button("finetune_default_train")
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
            err = finetunes.start(label, task, cfg)
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
