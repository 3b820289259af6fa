"""Train: configure a tiny BERT (with the objective switches of BERT, ALBERT, RoBERTa and SpanBERT), pretrain it
live in the background, open on the finished run's result (also after a reload), download or upload checkpoints."""
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from bertcore.analysis.live_probe import Probe, read_probe_csv
from bertcore.config import BertConfig, TrainConfig, estimate, measure_cadence
from bertcore.errors import BertcoreError, ConfigError
from bertcore.presets import PRESET_NOTES, PRESET_SIZES, PRESETS
from bertcore.presets import preset as preset_configs
from bertcore.launch import service
from bertcore.training.history import History
from explorer import livechart
from explorer.parts import skills_view
from explorer.figures import train as ft
from explorer.session import state
from explorer.launch import launcher
from explorer.parts import run_status
from explorer.launch import training_run
from explorer.parts import train_form
from explorer.i18n import mark, tr
from explorer.page_errors import error_text, user_action

HIDDEN_ACTS = ["gelu", "gelu_tanh", "relu"]
LRS = [1e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 8e-3, 1e-2, 3e-2, 1e-1, 1.0, 10.0]


PAGES = Path(__file__).resolve().parent
FORM_OPEN = "train_form_open"  # Reset pressed: the configuration open, no result, until the next Start
NORMS = ["post", "pre", "sublayer_output"]
MLM_HEADS = ["transform", "linear", "mlp"]


def _widgets(preset: str, size: str, disabled: bool, tokenizer, max_len: int | None = None):
    """All config widgets; returns (bert kwargs, train kwargs). Every switch of the preset that has no widget is
    kept as the preset sets it (bertcore.presets). Keys depend on the preset and size so a change resets them."""
    pb, pt = preset_configs(preset, size)
    b = {**BertConfig().to_dict(), **pb}
    t = {**TrainConfig().to_dict(), **pt}
    k = f"train_{preset}_{size}_"
    cm, ct = st.columns(2)
    with cm:
        st.markdown(tr("**Model** (`bertcore.config.BertConfig`)"))
        # None = init std scaled to the chosen width (BertConfig.initializer_range), unless the preset sets one
        bk = {**b, "vocab_size": tokenizer.vocab_size, "initializer_range": pb.get("initializer_range")}
        bk["num_hidden_layers"] = st.slider(tr("encoder layers"), 1, 12, int(b["num_hidden_layers"]), key=k + "L",
                                            disabled=disabled)
        bk["num_attention_heads"] = st.select_slider(tr("attention heads"), [1, 2, 3, 4, 6, 8, 12, 16],
                                                     int(b["num_attention_heads"]), key=k + "H", disabled=disabled)
        bk["hidden_size"] = int(st.number_input(tr("hidden size d_model"), 4, 1024, int(b["hidden_size"]), 1,
                                                key=k + "D", disabled=disabled,
                                                help=tr("Must be divisible by the number of heads (and even "
                                                        "for sinusoidal positions).")))
        bk["intermediate_size"] = st.select_slider(tr("FFN size"), [16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096],
                                                   int(b["intermediate_size"]), key=k + "F", disabled=disabled)
        drop = st.slider(tr("dropout"), 0.0, 0.5, float(b["hidden_dropout_prob"]), 0.05, key=k + "drop",
                         disabled=disabled)
        bk["hidden_dropout_prob"] = bk["attention_probs_dropout_prob"] = drop
        bk["max_position_embeddings"] = st.select_slider(tr("max positions"), [16, 32, 48, 64, 128, 256, 512],
                                                         int(b["max_position_embeddings"]), key=k + "P",
                                                         disabled=disabled)
        c1, c2 = st.columns(2)
        bk["position_embedding"] = c1.selectbox(tr("positions"), ["learned", "sinusoidal"],
                                                ["learned", "sinusoidal"].index(b["position_embedding"]),
                                                key=k + "pos", disabled=disabled)
        bk["norm_placement"] = c2.selectbox(tr("LayerNorm"), NORMS, NORMS.index(b["norm_placement"]),
                                            key=k + "norm", disabled=disabled,
                                            help=tr("post: LN(x + F(x)) (BERT); pre: x + F(LN(x)); "
                                                    "sublayer_output: x + LN(F(x)) (the blog seed)"))
        bk["mlm_head"] = c1.selectbox(tr("MLM head"), MLM_HEADS, MLM_HEADS.index(b["mlm_head"]), key=k + "mlm",
                                      disabled=disabled)
        no_head = st.session_state.get(k + "sent", t["sentence_task"]) == "none"  # the objective's radio below
        bk["nsp_head"] = c2.selectbox(tr("NSP head"), ["pooler", "first_token"],
                                      ["pooler", "first_token"].index(b["nsp_head"]), key=k + "nsp",
                                      disabled=disabled or no_head,
                                      help=tr("The sentence head (NSP or SOP): pooler = tanh(dense(h)) then the "
                                              "classifier (BERT); first_token = the classifier on h directly. h is "
                                              "[CLS], or the last token of a left-to-right model. Unused with "
                                              "sentence task none."))
        bk["hidden_act"] = c1.selectbox(tr("activation"), HIDDEN_ACTS, HIDDEN_ACTS.index(b["hidden_act"]),
                                        key=k + "act", disabled=disabled)
        kept = {f: b[f] for f in ("layer_norm_style", "embedding_scale", "embedding_layer_norm", "embedding_dropout",
                                  "train_position_embeddings", "train_pad_embedding", "ffn_dropout", "block_dropout",
                                  "attention_padding_mask", "segment_ids", "init") if f in b}
        st.caption(tr("Also from the preset: {settings}", settings=", ".join(f"{f}={v}" for f, v in kept.items())))
    with ct:
        st.markdown(tr("**Training** (`bertcore.config.TrainConfig`)"))
        tk = {}
        tk["steps"] = st.slider(tr("steps"), 20, 5000, int(t["steps"]), 10, key=k + "steps", disabled=disabled)
        tk["batch_size"] = st.select_slider(tr("batch size"), [4, 8, 16, 32, 64, 128, 256, 512], int(t["batch_size"]),
                                            key=k + "B", disabled=disabled)
        lr0 = min(LRS, key=lambda x: abs(x - float(t["lr"])))
        tk["lr"] = st.select_slider(tr("peak learning rate"), LRS, lr0, key=k + "lr", disabled=disabled,
                                    format_func=lambda x: f"{x:g}",
                                    help=tr("Try 10 to see a NaN stop: the last good weights are kept."))
        tk["warmup_steps"] = st.slider(tr("warmup steps"), 0, 1000, int(t["warmup_steps"]), 10, key=k + "warm",
                                       disabled=disabled)
        t_max = int(max_len or t["max_seq_len"])  # an upload of long text gets a shorter default (see render)
        tk["max_seq_len"] = st.slider(tr("max sequence length"), 8, 256, t_max, 4, key=k + f"T{t_max}",
                                      disabled=disabled,
                                      help=None if max_len is None else tr(
                                          "Picked for this corpus by `bertcore.data.corpus_defaults`: its median "
                                          "pair is longer, so a shorter cut keeps a step about as fast as on the "
                                          "built-in corpus (shorter still for a large vocabulary: every masked "
                                          "token's softmax runs over all of it). Raise it for more context per "
                                          "pair."))
        tk["seed"] = int(st.number_input(tr("seed"), 0, 2**31 - 1, int(t["seed"]), key=k + "seed", disabled=disabled))
        for f in ("weight_decay", "grad_clip", "nsp_positive_prob", "eval_size", "held_out_frac", "num_threads"):
            tk[f] = t[f]
        if t["pad_to"]:  # a seed that pads every example to a fixed length (BERT-pytorch's seq_len)
            tk["pad_to"] = max(int(t["pad_to"]), tk["max_seq_len"])
            st.caption(tr("Every batch is padded to {n} tokens, as the seed pads to its seq_len.", n=tk["pad_to"]))
        tk.update(measure_cadence(tk["steps"]))  # ~20 evaluations whatever the length (as `bertcore train`)
    ob, ot = train_form.objective_widgets(b, t, k, disabled, tokenizer)
    bk.update(ob)
    tk.update(ot)
    return bk, tk


def build_spec(bk: dict, tk: dict, corpus, tokenizer, **fields):
    """(the complete RunSpec or None, its estimate or None, problem message or None). Never raises on bad input:
    the spec is built and checked once, here (``explorer.launch.launcher.app_spec``); Start trains it as it is."""
    try:
        bcfg, tcfg = BertConfig(**bk), TrainConfig(**tk)
    except ConfigError as e:
        return None, None, error_text(e)
    est = estimate(bcfg, tcfg)
    try:
        return launcher.app_spec(bcfg, tcfg, corpus, tokenizer, **fields), est, None
    except BertcoreError as e:
        return None, est, error_text(e)


def _summary(job) -> str:
    """One line: the running job's model, training and objective settings."""
    b, t = job.model_config, job.train_config
    if b is None:  # a resumed run whose config.json could not be read here (the resume says why)
        return job.name
    return _config_line(job.name, b.to_dict(), t.to_dict())


def _config_line(name: str, b: dict, t: dict) -> str:
    """A run's settings in one line, from its config dicts (config.json, train_config.json)."""
    return tr("{label}: {layers} layers × {heads} heads, d {d}, FFN {ffn}, {norm}-LN, {pos} positions · {steps} steps, "
              "batch {batch}, lr {lr}, warmup {warmup}, max len {max_len}, seed {seed}", label=name,
              layers=b["num_hidden_layers"], heads=b["num_attention_heads"], d=b["hidden_size"],
              ffn=b["intermediate_size"], norm=b["norm_placement"], pos=b["position_embedding"], steps=t["steps"],
              batch=t["batch_size"], lr=f"{t['lr']:g}", warmup=t["warmup_steps"], max_len=t["max_seq_len"],
              seed=t["seed"]) + " · " + ft.objective_of(t, b).summary()


@dataclass
class Result:
    """A finished training the page opens on: its model as saved (history.csv, train_config.json, config.json) and
    its objective, read from those files."""

    label: str
    bundle: object
    objective: ft.Objective


def finished_result(run, active) -> Result | None:
    """The training to show as a result when none runs: this session's last run if it left a model, else the active
    model when it has a training history (a new session after F5 finds it on disk). None: show the form."""
    if run is not None:
        bundle = next((b for b in reversed(run.results) if b is not None), None)
        if bundle is None:  # it failed: the form, with the error
            return None
        label = run.jobs[-1].name or bundle.name
    else:
        bundle, label = active.bundle, active.label
        hist = getattr(bundle, "history", None)
        if active.kind == "untrained" or hist is None or not len(hist):
            return None
    return Result(label, bundle, ft.objective_of(getattr(bundle, "train_config", None), model=bundle.model))


def _saved_history(active, hist, result: bool) -> None:
    """The active model's saved history and probe table (its run directory's history.csv and probe.csv)."""
    run_dir = getattr(active.bundle, "run_dir", None)
    rows = read_probe_csv(Path(run_dir) / "probe.csv") if run_dir else []
    st.caption(tr("History of the active model, “{model}” (run folder `{run_dir}`).", model=active.label, run_dir=run_dir)
               if run_dir and not state.read_only()  # a shared run's folder names its owner's workspace
               else tr("History of the active model, “{model}”.", model=active.label))
    probe = Probe(rows[0]["text"], rows[0]["pair_a"], rows[0]["pair_b"]) if rows else None
    skills = skills_view.saved_skills(run_dir)
    names = skills_view.skill_names(skills)
    o = ft.objective_of(getattr(active.bundle, "train_config", None), model=active.model)
    drawn = skills_view.skill_names(skills, sentence_head=o.sentence_name is not None)
    livechart.live_panel(f"saved-{active.label}-{len(hist)}", int(hist["step"].max()),
                         livechart.skills_rows(History.read_frame(hist), skills, drawn), livechart.probe_rows(rows),
                         None, livechart.probe_caption(probe), key="train_live",
                         charts=livechart.train_charts(drawn, o), show_probe=True, objective=o)
    if not result:  # the result view says which skills reached 0.9 (under the curves)
        skills_view.show_first_passes(skills, names)


def _live(running: bool, result: bool = False) -> None:
    @st.fragment(run_every=1.0 if running else None)
    @user_action(tr("Show the training"))
    def live():
        run = launcher.get_run()
        if run is None:  # e.g. after a reload: the active model's saved history (its run's history.csv)
            hist = getattr(state.get_active().bundle, "history", None)
            if hist is None or not len(hist):
                st.info(tr("No training yet in this workspace. Press **Start**."))
                return
            _saved_history(state.get_active(), hist, result)
            return
        s = run.snapshot()
        run_status.show_run_status(s)
        hist = s.histories[0] if s.histories else None
        if hist is not None and len(hist) and not result:  # the result view has its final numbers instead
            recent = hist.rows_since(max(0, len(hist) - 20))
            tps = sum(r["tokens_per_s"] for r in recent) / len(recent)
            st.caption(tr("step {step} · lr {lr} (warmup, then linear decay) · {tps} tokens/s · faint lines: the "
                          "training batch; bold: held-out batches with fixed masks (`Trainer.evaluate`)",
                          step=recent[-1]["step"], lr=f"{recent[-1]['lr']:.2e}", tps=f"{tps:,.0f}"))
        probe = run.probe_objects[0] if getattr(run, "probe_objects", None) else None
        skills = s.skills[0] if s.skills else None
        names = skills_view.skill_names(skills)
        o = ft.objective_of(run.jobs[0].train_config, run.jobs[0].model_config)
        drawn = skills_view.skill_names(skills, sentence_head=o.sentence_name is not None)
        livechart.live_panel(f"{id(run):x}", run.jobs[0].train_config.steps, livechart.skills_rows(hist, skills, drawn),
                             livechart.probe_rows(s.probes[0] if s.probes else []),
                             s.baselines[0] if s.baselines else None, livechart.probe_caption(probe),
                             key="train_live", charts=livechart.train_charts(drawn, o), show_probe=True, objective=o)
        if not result:
            skills_view.show_first_passes(skills, names)
        if running and not s.running:  # finished since the timer started: rerun so it stops
            launcher.adopt_finished_runs()
            st.rerun()

    live()


# where to look next from a trained model: (page file, its title, what it shows of this model)
NEXT_PAGES = [("attention.py", mark("Attention"), mark("what each head of this model attends to")),
              ("predict.py", mark("Predict"), mark("its guesses for your own sentences")),
              ("forward.py", mark("Inside the model"), mark("one forward pass through it, stage by stage")),
              ("lab.py", mark("Lab"), mark("the paper's ablation tables, rerun over seeds"))]


def _final_numbers(hist, o: ft.Objective) -> str:
    """The last held-out evaluation in words, named after the objective (a run without a sentence task has none)."""
    ev = hist.dropna(subset=["eval_mlm_acc"]) if hist is not None and "eval_mlm_acc" in hist else None
    if ev is None or not len(ev):
        return tr("No held-out evaluation was made.")
    last = ev.iloc[-1]
    text = tr("At step {step}, held-out {task} accuracy **{acc}** (loss {loss})", step=int(last["step"]),
              task=o.word_task, acc=f"{last['eval_mlm_acc']:.3f}", loss=f"{last['eval_mlm_loss']:.3f}")
    nsp = last.get("eval_nsp_acc")
    if o.sentence_name and nsp is not None and nsp == nsp:
        text += " · " + tr("{task} accuracy **{acc}**", task=o.sentence_name, acc=f"{nsp:.3f}")
    elif o.sentence_name is None:
        text += " · " + tr("no sentence task ({task} alone, as RoBERTa §4.2)", task=o.word_task)
    return text + "."


def _show_result(r: Result) -> None:
    """The result view: what was trained, the final numbers, where to look next, the final curves, and the skills
    that reached 0.9 (the run's skills.csv)."""
    st.subheader(tr("Result: {name}", name=r.label))
    b, t = r.bundle.model.config.to_dict(), r.bundle.train_config
    if t:
        st.caption(_config_line(r.label, b, {**TrainConfig().to_dict(), **t}))
    st.markdown(_final_numbers(r.bundle.history, r.objective))
    cols = st.columns([3] + [2] * len(NEXT_PAGES), vertical_alignment="center")
    cols[0].markdown(tr("**Where to look next** with this model:"))
    for col, (fname, title, what) in zip(cols[1:], NEXT_PAGES):
        if not (PAGES / fname).exists():
            continue
        try:
            col.page_link(f"app_pages/{fname}", label=tr(title), icon=":material/arrow_forward:", help=tr(what))
        except Exception:  # noqa: BLE001 - a page file app.py does not register (yet): no link to it
            continue
    _live(False, result=True)
    skills = skills_view.saved_skills(getattr(r.bundle, "run_dir", None))
    skills_view.show_skills_passed(skills, skills_view.skill_names(skills))


def size_help(name: str) -> str:
    """The Size choice's help: the selected preset's paper size, read from its config (bertcore.presets)."""
    s = preset_configs(name, "paper")[0]
    return tr("tiny trains in about a minute; paper is the model size of the seed's own code or paper (here: "
              "{layers} layers × {d}, {heads} heads, FFN {ffn}); the budget check says whether it may train here.",
              layers=s["num_hidden_layers"], d=s["hidden_size"], heads=s["num_attention_heads"],
              ffn=s["intermediate_size"])


def render() -> None:
    st.title(tr("Train a tiny BERT"))
    active = state.get_active()
    run = launcher.get_run()
    running = run is not None and run.running
    result = None if running or st.session_state.get(FORM_OPEN) else finished_result(run, active)
    if running:
        label = tr("Training · {summary}", summary=_summary(run.jobs[0]))
    elif result is not None:  # the page opens on the result; the form of the next training stays one click away
        label = tr("Configuration of the next training: corpus, model, training, objective and the live probe")
    else:
        label = tr("Configuration: corpus, model, training, objective and the live probe")
    spec = problem = None
    with st.expander(label, expanded=not running and result is None):
        with user_action(tr("Read the corpus"), tr("The corpus cannot be used: ")) as act:
            corpus, choice = train_form.corpus_choice(running)
        if act.failed:
            return
        p1, p2 = st.columns([3, 2])
        preset = p1.selectbox(tr("Preset"), list(PRESETS), key="train_preset", disabled=running,
                              help=tr("Original BERT, or the design choices of a seed tutorial, as the seed's code "
                                      "writes them (`python -m bertcore presets`)."))
        size = p2.radio(tr("Size"), PRESET_SIZES, key="train_size", horizontal=True, disabled=running,
                        help=size_help(preset))
        with user_action(tr("Build the vocabulary"), tr("The corpus cannot be used: ")) as act:
            tok, ckey = train_form.tokenizer_choice(corpus, choice, preset, size, running)
        if act.failed:
            return
        notes = PRESET_NOTES.get(preset, [])
        if notes:  # what the seed's code did and where the preset departs from it (bertcore.presets)
            st.caption(tr("**{preset}** against its seed: {notes}.", preset=preset,
                          notes="; ".join(tr(n) for n in notes)))
        bk, tk = _widgets(preset, size, running, tok, train_form.upload_max_len(corpus, tok, ckey, size, preset))
        est_slot = st.empty()  # the estimate's line, above the probe's inputs
        probe, probe_problem = train_form.probe_inputs(corpus, tok, ckey, running, bk["max_position_embeddings"])
        skill_csv = skills_view.skill_upload(tok, running)
        spec, est, problem = build_spec(bk, tk, corpus, tok, name=f"{preset}, seed {tk['seed']}", preset=preset,
                                        probe=probe, skill_csv=skill_csv,
                                        defaults=train_form.chosen_defaults(corpus, tok, ckey, preset, size).to_dict())
        if est is not None:
            parts = ", ".join(f"{k} {v:,}" for k, v in est["params_by_part"].items())
            est_slot.caption(tr("`bertcore.config.estimate`: **{params} parameters** ({parts}); about **{mb} MB** to "
                                "train (budget {budget} MB).", params=f"{est['params']:,}", parts=parts,
                                mb=f"{est['memory_bytes'] / 2**20:,.1f}", budget=f"{service.max_model_mb():,.0f}"))
        problem = problem or probe_problem
    if problem and not running:
        st.error(tr("Cannot start: {problem}", problem=problem))

    b1, b2, b3, b4 = st.columns([1, 1, 1, 5])
    if state.read_only():  # a run shown by a read-only link: nothing trains from this session (explorer.session.share_links)
        st.info(tr(state.READ_ONLY))
    if b1.button(tr("Start"), key="train_start", type="primary",
                 disabled=running or problem is not None or state.read_only()):
        with user_action(tr("Start the training")):
            err = launcher.start_run([spec])
            if err:
                st.error(err)
            else:
                st.session_state.pop(FORM_OPEN, None)  # once it has trained, the page opens on its result
                st.rerun()
    if b2.button(tr("Stop"), key="train_stop", disabled=not running):
        run.stop()
        run.join(2.0)
        st.rerun()
    if b3.button(tr("Reset"), key="train_reset",
                 help=tr("Stop and clear the charts and open the configuration; trained models stay in the "
                         "switcher.")):
        if run is not None:
            run.stop()
            run.adopted = True
        launcher.forget_run()
        st.session_state[FORM_OPEN] = True
        st.rerun()
    if result is not None:
        b4.caption(tr("**Start** trains a new model with the configuration above: open it to see or change the "
                      "settings first."))
    else:
        b4.caption(tr("When training ends (or you press Stop), the model becomes the active model “{label}” for "
                      "every page; the sidebar shows progress on other pages.", label=tr(training_run.TRAINED_LABEL)))
    train_form.runtime_caption(run if running else None)
    if result is not None:
        _show_result(result)
    else:
        _live(running)
    if not running:
        if result is None:
            st.markdown(tr(
                "`bertcore.training.trainer.Trainer` pretrains on the objective chosen above, by default MLM (BERT "
                "§3.1) + NSP (§3.2), in a background process. Held-out curves use fixed masks (`Trainer.evaluate`); "
                "the learning rate warms up linearly, then decays to 0 (§A.2). The probe table asks the same "
                "sentence at every evaluation (`bertcore.analysis.live_probe`)."))
            st.latex(r"\eta_t = \eta_{\max}\cdot\min\!\left(\frac{t}{t_{\text{warm}}},\;"
                     r"\frac{T-t}{T-t_{\text{warm}}}\right)")
        train_form.checkpoints(active)


render()
