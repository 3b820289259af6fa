"""Fine-tune: fine-tune a pretrained encoder and the same architecture from random weights, and see what pretraining buys."""
import streamlit as st

from explorer import state

_KEY = "bx_finetune_run"
LABEL_CHOICES = [16, 32, 64, 128, 256, 512, 1024, 0]  # 0 = all
STEP_CHOICES = [10, 20, 50, 100, 150, 200, 300, 500]
_UPLOAD = "your CSV (upload below)"


def _pretrained_choices() -> dict[str, str]:
    """label -> model key (``state.list_models``) of every model that can start a fine-tune; loaded only when
    Start is pressed."""
    models = state.list_models()
    return {label: key for label, key in models.keys_by_label.items() if key != "untrained"}


def _task(name: str):
    """(Task or None, error or None)."""
    from bertcore.data.tasks import load_task_csv
    from bertcore.errors import BertcoreError

    try:
        if name != _UPLOAD:
            return _cached_task(name), None
        up = st.session_state.get("finetune_csv")
        if up is None:
            return None, "Upload a CSV with the header text,label (or text_a,text_b,label)."
        return load_task_csv(up.getvalue(), name=up.name), None
    except BertcoreError as e:
        return None, f"This file cannot be used: {e}"
    except Exception as e:  # noqa: BLE001 - never a traceback
        return None, f"This file cannot be used: {type(e).__name__}: {e}"


@st.cache_resource(show_spinner="Building the task from the built-in grammar…")
def _cached_task(name: str):
    from bertcore.data.tasks import get_task

    return get_task(name)


def _start(label: str, task, cfg) -> str | None:
    from bertcore.errors import BertcoreError
    from bertcore.training.finetune_compare import PretrainingComparison
    from explorer import training_run

    old = st.session_state.get(_KEY)
    if old is not None and old.running:
        return "A fine-tuning is already running in this session; stop it first."
    try:
        am = state.list_models()[label]
    except (BertcoreError, OSError, KeyError) as e:
        return f"That model cannot be loaded: {e}"
    run = PretrainingComparison(am.model, am.tokenizer, task, cfg, label,
                                abandon_after=training_run.abandon_seconds())
    slot = id(run)
    try:
        training_run._acquire_slot(slot)  # the server-wide cap on concurrent trainings (BERTCORE_MAX_TRAININGS)
    except training_run.ServerBusy as e:
        return str(e)
    run.start(on_exit=lambda: training_run._release_slot(slot))
    st.session_state[_KEY] = run
    st.session_state["finetune_meta"] = dict(task=task, source=label, labels=cfg.labels)
    return None


def _live(running: bool) -> None:
    from bertcore.training.finetune_compare import PRETRAINED, SCRATCH, summary_line
    from explorer import figures_finetune as ff

    @st.fragment(run_every=1.0 if running else None)
    def live():
        run = st.session_state.get(_KEY)
        if run is None:
            st.info("Pick a pretrained model and a task, then press **Start**.")
            return
        s = run.snapshot()
        meta = st.session_state.get("finetune_meta", {})
        task = meta.get("task")
        st.progress(s.progress, text=f"{s.status}: step {s.step}/{s.steps} of each model · "
                                     f"elapsed {state.fmt_seconds(s.elapsed)}")
        if s.message:
            st.error(s.message)
        chance = 1 / task.num_labels if task is not None else None
        st.plotly_chart(ff.heldout_accuracy_figure(s.histories, chance), key="finetune_curves")
        st.markdown("**" + summary_line(s.final_accuracy(PRETRAINED), s.final_accuracy(SCRATCH),
                                        run.labels_used, meta.get("source", "")) + "**")
        if running and not s.running:
            st.rerun()

    live()


def _try_it(run) -> None:
    from bertcore.errors import BertcoreError
    from bertcore.training.finetune import classify
    from explorer import figures_finetune as ff

    task = st.session_state["finetune_meta"]["task"]
    st.subheader("Try it")
    first = task.held_out[0]
    c1, c2 = st.columns(2)
    a = c1.text_input("sentence" if not task.pair else "sentence A", first.text_a, key="finetune_text_a")
    b = c2.text_input("sentence B", first.text_b, key="finetune_text_b") if task.pair else None
    try:
        probs = {k: classify(m, run.tokenizer, a, b) for k, m in run.models.items()}
    except BertcoreError as e:
        st.error(str(e))
        return
    st.plotly_chart(ff.probabilities_figure(task.labels, probs), key="finetune_probs")
    st.caption("`bertcore.training.finetune.classify`: softmax over the classifier's logits, eval mode.")


def render() -> None:
    from bertcore.data.tasks import task_names
    from bertcore.training.finetune import MINILM_LR, FinetuneConfig

    st.title("Fine-tune: what pretraining buys")
    st.markdown(
        "BERT's point (§4): one pretrained encoder transfers to a new task with few labels. Here a classifier "
        "(`bertcore.model.classification.BertForSequenceClassification`: the pooled [CLS] vector → one linear "
        "layer) is fine-tuned twice with the **same labelled examples, batch order, dropout masks and seed**: once "
        "from the pretrained weights, once from random initial weights of the same architecture. The gap between "
        "the two held-out curves is what pretraining bought."
    )
    state.get_active()
    run = st.session_state.get(_KEY)
    running = run is not None and run.running
    choices = _pretrained_choices()
    if not choices:
        st.info("No pretrained model yet. Train the default model (the sidebar's active model becomes the "
                "starting point), or load all-MiniLM-L6-v2 in the sidebar.")
        state.default_train_button("finetune_default_train")
        return
    tasks = task_names() + [_UPLOAD]
    c1, c2 = st.columns(2)
    label = c1.selectbox("Pretrained model", list(choices), key="finetune_model", disabled=running)
    task_name = c2.selectbox("Task", tasks, key="finetune_task", disabled=running)
    if task_name == _UPLOAD:
        st.file_uploader("CSV: text,label or text_a,text_b,label", type=["csv"], key="finetune_csv",
                         disabled=running)
    task, err = _task(task_name)
    if err and task is None and st.session_state.get("finetune_csv") is None and task_name == _UPLOAD:
        st.info(err)
    elif err:
        st.error(err)
    elif task is not None:
        st.caption(f"**{task.name}**: {task.description} Classes: {', '.join(task.labels)}; "
                   f"{len(task.train)} training examples in the pool, {len(task.held_out)} held out.")
    d1, d4, d2, d3 = st.columns([2, 2, 1, 1])
    n = d1.select_slider("labelled examples", LABEL_CHOICES, 64, key="finetune_labels", disabled=running,
                         format_func=lambda x: "all" if x == 0 else str(x))
    steps = d4.select_slider("steps", STEP_CHOICES, 150, key="finetune_steps", disabled=running)
    probe = d2.radio("mode", ["full fine-tuning", "linear probe"], key="finetune_mode", disabled=running,
                     help="Linear probe: the encoder is frozen and only the classifier trains.") == "linear probe"
    seed = int(d3.number_input("seed", 0, 2**31 - 1, 0, key="finetune_seed", disabled=running))
    is_minilm = choices.get(label) == "minilm"
    cfg = FinetuneConfig(steps=steps, labels=n, seed=seed, freeze_encoder=probe, lr=MINILM_LR if is_minilm else FinetuneConfig.lr,
                         eval_every=max(1, steps // (6 if is_minilm else 15)))
    b1, b2, _ = st.columns([1, 1, 4])
    if b1.button("Start", key="finetune_start", type="primary", disabled=running or task is None):
        err = _start(label, task, cfg)
        if err:
            st.error(err)
        else:
            st.rerun()
    if b2.button("Stop", key="finetune_stop", disabled=not running):
        run.stop()
        run.join(2.0)
        st.rerun()
    _live(running)
    if run is not None and not running and run.models:
        _try_it(run)


render()
