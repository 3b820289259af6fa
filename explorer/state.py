"""Session state of the explorer: the active model, the session's model registry and its runs.

* The untrained default model is one shared, read-only resource (``st.cache_resource``);
  trainers never touch it (they build their own model).
* Everything a session trains, uploads or imports lives in ``st.session_state`` only.
* The background runner (``TrainingRun``, caps, heartbeat) lives in ``explorer.training_run`` and the
  safe checkpoint zips in ``explorer.uploads``; both are re-exported here, so ``state.TrainingRun`` etc. work.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported (see bertcore/__init__.py)

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from explorer.training_run import (  # noqa: F401 - re-exported for pages and tests
    TRAINED_LABEL,
    Job,
    RunSnapshot,
    ServerBusy,
    TrainingRun,
    abandon_seconds,
    fmt_seconds,
    make_bundle,
    max_model_mb,
    max_trainings,
    running_trainings,
    warmup_optimizer,
)
from explorer.uploads import (  # noqa: F401 - re-exported for pages and tests
    FORBIDDEN_SUFFIXES,
    MAX_UPLOAD_UNCOMPRESSED,
    checkpoint_zip_bytes,
    load_checkpoint_zip,
    safe_extract_zip,
)

UNTRAINED_LABEL = "fresh untrained (shared)"
DEFAULT_TRAIN_LABEL = "Train the default model (~1 min)"

_K_MODELS = "bx_models"  # label -> ActiveModel, this session's own models
_K_ACTIVE = "bx_active"  # label of the active model
_K_RUN = "bx_run"  # TrainingRun of the Train page / default button
_K_COMPARE = "bx_compare_run"  # TrainingRun of the Compare page
_K_TMP = "bx_tmp"  # this session's temp dir (uploads)


# ----------------------------------------------------------------------------- bundles and models
@dataclass
class ActiveModel:
    bundle: Any
    label: str
    kind: str  # "untrained" | "trained" | "uploaded" | "pretrained"
    is_trained: bool

    @property
    def model(self):
        return self.bundle.model

    @property
    def tokenizer(self):
        return self.bundle.tokenizer


@st.cache_resource(show_spinner="Building the built-in corpus and tokenizer…")
def shared_corpus_and_tokenizer():
    """The built-in corpus (seed 0) and its word-level tokenizer, shared read-only by all sessions."""
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer

    corpus = builtin_corpus(seed=0)
    return corpus, WordTokenizer.build(corpus.texts())


@st.cache_resource(show_spinner="Building the untrained default model…")
def shared_untrained_bundle():
    """BertForPreTraining(BertConfig(vocab_size=...)) with torch.manual_seed(0), eval mode. Never mutated."""
    import torch

    from bertcore.config import BertConfig
    from bertcore.model import BertForPreTraining

    _, tok = shared_corpus_and_tokenizer()
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=tok.vocab_size)).eval()
    return make_bundle(model=model, tokenizer=tok, history=None, name="untrained default",
                       source="random init, seed 0")


def _untrained() -> ActiveModel:
    return ActiveModel(shared_untrained_bundle(), UNTRAINED_LABEL, "untrained", False)


def list_models() -> dict[str, ActiveModel]:
    """The shared untrained model plus this session's own models (label -> ActiveModel)."""
    out = {UNTRAINED_LABEL: _untrained()}
    out.update(st.session_state.get(_K_MODELS, {}))
    return out


def set_active(kind: str, bundle, label: str) -> ActiveModel:
    """Register ``bundle`` under ``label`` in this session and make it the active model."""
    if kind == "untrained" or bundle is None:
        st.session_state[_K_ACTIVE] = UNTRAINED_LABEL
        return _untrained()
    am = ActiveModel(bundle, label, kind, kind != "untrained")
    st.session_state.setdefault(_K_MODELS, {})[label] = am
    st.session_state[_K_ACTIVE] = label
    return am


def select_active(label: str) -> None:
    """Switch to an already registered model by label."""
    if label in list_models():
        st.session_state[_K_ACTIVE] = label


def get_active() -> ActiveModel:
    """The model every page shows: the session's choice, else the shared untrained model."""
    adopt_finished_runs()
    models = list_models()
    return models.get(st.session_state.get(_K_ACTIVE, UNTRAINED_LABEL), models[UNTRAINED_LABEL])


def session_tmp_dir() -> Path:
    """This session's own temp dir (uploads are extracted only below it)."""
    p = st.session_state.get(_K_TMP)
    if not p or not Path(p).is_dir():
        p = tempfile.mkdtemp(prefix="bertx-session-")
        st.session_state[_K_TMP] = p
    return Path(p)



def get_run(key: str = _K_RUN) -> TrainingRun | None:
    return st.session_state.get(key)


def start_run(jobs, corpus, tokenizer=None, key: str = _K_RUN) -> str | None:
    """Start a background run stored under ``key``; returns an error message or None."""
    old = st.session_state.get(key)
    if old is not None and old.running:
        return "A training is already running in this session; stop it first."
    run = TrainingRun(jobs, corpus, tokenizer)
    try:
        run.start()
    except ServerBusy as e:
        return str(e)
    st.session_state[key] = run
    return None


def stop_all_runs() -> None:
    for key in (_K_RUN, _K_COMPARE):
        run = st.session_state.get(key)
        if run is not None:
            run.stop()


def adopt_finished_runs() -> bool:
    """Make the finished main run's model this session's "trained in this session" active model."""
    run = st.session_state.get(_K_RUN)
    if run is None or run.running or run.adopted:
        return False
    run.adopted = True
    bundle = run.results[-1] if run.results else None
    if bundle is None:
        return False
    set_active("trained", bundle, TRAINED_LABEL)
    return True


def default_jobs():
    from bertcore.config import BertConfig, TrainConfig

    _, tok = shared_corpus_and_tokenizer()
    return [Job(BertConfig(vocab_size=tok.vocab_size), TrainConfig(), "default model")]


def default_train_button(key: str) -> None:
    """One-click "Train the default model (~1 min)" (built-in corpus, default configs, background run)."""
    run = get_run()
    if run is not None and run.running:
        s = run.snapshot()
        st.info(f"Training in the background: step {s.total_done}/{s.total_steps}. "
                "The sidebar shows its progress; the Train page shows the live charts.")
        return
    if st.button(DEFAULT_TRAIN_LABEL, key=key, type="primary"):
        corpus, tok = shared_corpus_and_tokenizer()
        err = start_run(default_jobs(), corpus, tok)
        if err:
            st.error(err)
        else:
            st.success("Training started in the background; it becomes the active model when done.")


def untrained_notice() -> None:
    """A clear label when the active model is the untrained one."""
    if get_active().kind == "untrained":
        st.info("**Untrained model.** The active model has random weights (seed 0): what you see here is "
                "the starting point, not learned behaviour. Train the default model below or on the Train page.")



def load_uploaded_checkpoint(data: bytes, name: str = "checkpoint.zip"):
    """Safely extract and load an uploaded checkpoint zip into this session's temp dir (BertcoreError only)."""
    return load_checkpoint_zip(data, session_tmp_dir(), name)


def show_run_status(s, per_job: bool = False) -> None:
    """Progress bar (step, elapsed, ETA) and any error of a ``TrainingRun.snapshot()``.

    ``per_job`` names the job being trained and prefixes errors with its label (Compare page)."""
    eta = f" · ETA {fmt_seconds(s.eta)}" if s.running else ""
    job = f"training {s.labels[s.job_index]} · " if per_job else ""
    st.progress(s.progress, text=f"{s.status}: {job}step {s.total_done}/{s.total_steps} · "
                                 f"elapsed {fmt_seconds(s.elapsed)}{eta}")
    if s.message:
        st.error(s.message)
    for label, err in zip(s.labels, s.errors):
        if err:
            st.error(f"{label if per_job else 'Training'} stopped: {err}")
