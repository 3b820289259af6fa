"""Session state of the explorer: the active model, the session's model registry, and the
background training runner.

* The untrained default model is one shared, read-only resource (``st.cache_resource``);
  trainers never touch it (they build or deep-copy their own model).
* Everything a session trains, uploads or imports lives in ``st.session_state`` only.
* ``TrainingRun`` runs ``bertcore.trainer.Trainer`` in a plain ``threading.Thread`` that never calls
  ``st.*``; the UI polls ``snapshot()``, which doubles as a heartbeat. A run nobody polled for
  ``BERTCORE_ABANDON_SECONDS`` (default 10 s) stops itself: its tab was closed. At most
  ``BERTCORE_MAX_TRAININGS`` (default 2) runs train at once in this server process.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported (see bertcore/__init__.py)

import io
import math
import shutil
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
import streamlit as st

UNTRAINED_LABEL = "fresh untrained (shared)"
TRAINED_LABEL = "trained in this session"
DEFAULT_TRAIN_LABEL = "Train the default model (~30 s)"

_K_MODELS = "bx_models"  # label -> ActiveModel, this session's own models
_K_ACTIVE = "bx_active"  # label of the active model
_K_RUN = "bx_run"  # TrainingRun of the Train page / default button
_K_COMPARE = "bx_compare_run"  # TrainingRun of the Compare page
_K_TMP = "bx_tmp"  # this session's temp dir (uploads)


# ----------------------------------------------------------------------------- limits
def abandon_seconds() -> float:
    """Seconds without a poll after which a training thread stops itself (env BERTCORE_ABANDON_SECONDS)."""
    try:
        return max(0.1, float(os.environ.get("BERTCORE_ABANDON_SECONDS", "10")))
    except ValueError:
        return 10.0


def max_trainings() -> int:
    """Concurrent trainings allowed in this server process (env BERTCORE_MAX_TRAININGS, default 2)."""
    try:
        return max(1, int(os.environ.get("BERTCORE_MAX_TRAININGS", "2")))
    except ValueError:
        return 2


def max_model_mb() -> float:
    """Training-memory budget per run in MB (env BERTCORE_MAX_MODEL_MB, default 1024)."""
    try:
        return max(1.0, float(os.environ.get("BERTCORE_MAX_MODEL_MB", "1024")))
    except ValueError:
        return 1024.0


MAX_UPLOAD_UNCOMPRESSED = 200 * 1024 * 1024  # bytes, checkpoint zip after extraction
FORBIDDEN_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy")


# ----------------------------------------------------------------------------- legacy deep-link guard
def ensure_app_frame() -> None:
    """Re-route a page that Streamlit ran without app.py (the multipage v1 'legacy' mode).

    On a freshly started server, before any session ran app.py's ``st.navigation``, Streamlit
    treats the ``pages/`` folder as a v1 multipage app and a deep link like ``/train`` executes
    ``pages/train.py`` alone. We switch the process to v2 and rerun the same URL through app.py.
    Called by every function pages use first (get_active, ...) and by app.py; cheap otherwise.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # pragma: no cover - other streamlit versions
        return
    if not PagesManager.uses_pages_directory:
        return
    PagesManager.uses_pages_directory = False
    from streamlit.runtime.scriptrunner import RerunData, RerunException, get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None:
        return
    pm = ctx.pages_manager
    raise RerunException(RerunData(query_string=ctx.query_string, page_script_hash=pm.intended_page_script_hash or "",
                                   page_name=pm.intended_page_name or ""))


# ----------------------------------------------------------------------------- bundles and models
@dataclass
class _StandInBundle:
    """Used only if bertcore.checkpoint is missing; same fields as ModelBundle."""

    model: Any
    tokenizer: Any
    history: Any = None
    name: str = ""
    source: str = ""
    snapshots: list = field(default_factory=list)
    probe_tokens: list = field(default_factory=list)


def make_bundle(**kw):
    try:
        from bertcore.checkpoint import ModelBundle
    except ImportError:
        return _StandInBundle(**kw)
    return ModelBundle(**kw)


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
    from bertcore.corpus import builtin_corpus
    from bertcore.tokenization import WordTokenizer

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
    ensure_app_frame()
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


# ----------------------------------------------------------------------------- training runner
class ServerBusy(RuntimeError):
    """Raised by TrainingRun.start when the process-wide cap on trainings is reached."""


_SLOT_LOCK = threading.Lock()
_RUNNING: set[int] = set()


def running_trainings() -> int:
    with _SLOT_LOCK:
        return len(_RUNNING)


def _acquire_slot(run_id: int) -> None:
    with _SLOT_LOCK:
        n, cap = len(_RUNNING), max_trainings()
        if n >= cap:
            raise ServerBusy(
                f"Server busy: {n} training{'s' if n != 1 else ''} running (the limit is {cap}, "
                "set by BERTCORE_MAX_TRAININGS). Try again in a minute."
            )
        _RUNNING.add(run_id)


def _release_slot(run_id: int) -> None:
    with _SLOT_LOCK:
        _RUNNING.discard(run_id)


_WARM = threading.Event()


def warmup_optimizer() -> None:
    """The first torch optimizer in a process lazily imports torch._dynamo (~1.5 s): pay it at start-up."""
    if _WARM.is_set():
        return
    _WARM.set()

    def _go():
        import torch

        p = torch.zeros(1, requires_grad=True)
        p.grad = torch.zeros(1)
        torch.optim.AdamW([p], lr=1e-3).step()

    threading.Thread(target=_go, name="bx-optim-warmup", daemon=True).start()


@dataclass
class Job:
    model_config: Any
    train_config: Any
    label: str = "model"


@dataclass
class RunSnapshot:
    status: str  # idle | preparing | running | finished | stopped | abandoned | error
    running: bool
    job_index: int
    step: int  # steps done in the current job
    steps: int  # steps of the current job
    total_done: int
    total_steps: int
    elapsed: float
    eta: float | None
    histories: list  # one DataFrame per job
    labels: list
    message: str | None
    errors: list  # Trainer.error per job (NaN stop etc.)

    @property
    def progress(self) -> float:
        return min(1.0, self.total_done / self.total_steps) if self.total_steps else 0.0


_HISTORY_COLUMNS = ["step", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr", "tokens_per_s",
                    "eval_mlm_loss", "eval_nsp_loss", "eval_mlm_acc", "eval_nsp_acc"]


def _clean_row(row) -> dict:
    out = {}
    for k, v in dict(row or {}).items():
        if isinstance(v, bool):
            continue
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


class TrainingRun:
    """One background training of one or more jobs (run one after the other)."""

    def __init__(self, jobs, corpus, tokenizer=None, abandon_after: float | None = None):
        self.jobs = list(jobs)
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.abandon_after = abandon_seconds() if abandon_after is None else float(abandon_after)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows: list[list[dict]] = [[] for _ in self.jobs]
        self._final_hist: list = [None for _ in self.jobs]
        self._errors: list = [None for _ in self.jobs]
        self.results: list = [None for _ in self.jobs]
        self._status = "idle"
        self._message: str | None = None
        self._job = 0
        self._started = 0.0
        self._finished: float | None = None
        self.last_poll = time.monotonic()
        self.adopted = False

    # -- control (UI thread) --
    def start(self) -> "TrainingRun":
        _acquire_slot(id(self))
        self._status = "preparing"
        self._started = time.monotonic()
        self.last_poll = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"bx-train-{id(self):x}", daemon=True)
        try:
            self._thread.start()
        except BaseException:
            _release_slot(id(self))
            raise
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def status(self) -> str:
        return self._status

    def snapshot(self) -> RunSnapshot:
        """A consistent copy of the state (plain floats / DataFrames); also the heartbeat."""
        self.last_poll = time.monotonic()
        with self._lock:
            hists = []
            for i, rows in enumerate(self._rows):
                if self._final_hist[i] is not None:
                    hists.append(self._final_hist[i].copy())
                else:
                    hists.append(pd.DataFrame(rows, columns=None if rows else _HISTORY_COLUMNS))
            job = self._job
            step = len(self._rows[job]) if self.jobs else 0
            steps = int(self.jobs[job].train_config.steps) if self.jobs else 0
            total_steps = sum(int(j.train_config.steps) for j in self.jobs)
            done = sum(len(r) for r in self._rows)
            status, message, errors = self._status, self._message, list(self._errors)
            end = self._finished if self._finished is not None else time.monotonic()
        elapsed = max(0.0, end - self._started) if self._started else 0.0
        eta = None
        if done and status in ("running", "preparing"):
            eta = elapsed / done * max(0, total_steps - done)
        return RunSnapshot(status, self.running, job, step, steps, done, total_steps, elapsed, eta, hists,
                           [j.label for j in self.jobs], message, errors)

    # -- worker thread: never calls st.* --
    def _run(self) -> None:
        try:
            import torch

            torch.set_num_threads(1)
            from bertcore.trainer import Trainer

            for i, job in enumerate(self.jobs):
                if self._stop.is_set():
                    break
                with self._lock:
                    self._job, self._status = i, "preparing"
                trainer = Trainer(job.model_config, job.train_config, self.corpus, tokenizer=self.tokenizer)
                with self._lock:
                    self._status = "running"
                steps = int(job.train_config.steps)
                while not getattr(trainer, "done", False) and trainer.step_count < steps:
                    if self._stop.is_set():
                        break
                    if time.monotonic() - self.last_poll > self.abandon_after:
                        with self._lock:
                            self._status = "abandoned"
                        self._stop.set()
                        break
                    row = _clean_row(trainer.step())
                    with self._lock:
                        self._rows[i].append(row)
                    if getattr(trainer, "error", None):
                        break
                if not getattr(trainer, "done", True) and hasattr(trainer, "finalize"):
                    trainer.finalize()  # stopped early: evaluate the weights we keep, last snapshot
                self._finish_job(i, job, trainer)
                if self._errors[i]:
                    break
            with self._lock:
                if self._status != "abandoned":
                    self._status = "stopped" if self._stop.is_set() else "finished"
        except Exception as e:  # noqa: BLE001 - shown to the user as a message, never a traceback
            from bertcore.errors import BertcoreError

            msg = str(e) if isinstance(e, BertcoreError) else f"training failed: {type(e).__name__}: {e}"
            with self._lock:
                self._status, self._message = "error", msg
        finally:
            with self._lock:
                self._finished = time.monotonic()
            _release_slot(id(self))

    def _finish_job(self, i: int, job: Job, trainer) -> None:
        hist = trainer.history
        if not isinstance(hist, pd.DataFrame):
            hist = pd.DataFrame(hist)
        model = trainer.model
        model.eval()
        bundle = make_bundle(model=model, tokenizer=trainer.tokenizer, history=hist.copy(), name=job.label,
                             source=TRAINED_LABEL, snapshots=list(getattr(trainer, "snapshots", []) or []),
                             probe_tokens=list(getattr(trainer, "probe_tokens", []) or []))
        with self._lock:
            self._final_hist[i] = hist.copy()
            self._errors[i] = getattr(trainer, "error", None)
            self.results[i] = bundle


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
    """One-click "Train the default model (~30 s)" (built-in corpus, default configs, background run)."""
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


# ----------------------------------------------------------------------------- safe checkpoint upload
def safe_extract_zip(data: bytes, dest: Path, max_total: int = MAX_UPLOAD_UNCOMPRESSED) -> Path:
    """Extract an uploaded zip below ``dest`` or raise CheckpointError with the reason.

    Rejects absolute paths and ``..`` components, links, more than ``max_total`` uncompressed
    bytes (counted while reading, so a lying header cannot bomb us), and pickle-like files
    (.bin/.pt/.pkl/...): pickles can run code when loaded and are never loaded here.
    """
    from bertcore.errors import CheckpointError

    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise CheckpointError(f"this file is not a readable zip archive ({e}); upload the zip made by "
                              "'Download checkpoint'") from None
    dest = Path(dest).resolve()
    with zf:
        infos = zf.infolist()
        if len(infos) > 1000:
            raise CheckpointError(f"the zip has {len(infos)} entries; a checkpoint has a handful of files")
        declared = 0
        for info in infos:
            name = info.filename
            p = PurePosixPath(name.replace("\\", "/"))
            if p.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") \
                    or ".." in p.parts:
                raise CheckpointError(f"unsafe path {name!r} in the zip (absolute or '..'); refusing to extract")
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise CheckpointError(f"{name!r} is a symbolic link; refusing to extract")
            if p.suffix.lower() in FORBIDDEN_SUFFIXES:
                raise CheckpointError(
                    f"{name!r} is a pickle-style file ({p.suffix}); pickles can run code and are never loaded. "
                    "Use a checkpoint with model.safetensors")
            declared += info.file_size
        if declared > max_total:
            raise CheckpointError(f"the zip expands to {declared / 1e6:.0f} MB, more than the "
                                  f"{max_total / 1e6:.0f} MB limit for uploads")
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        total = 0
        try:
            for info in infos:
                target = (dest / info.filename).resolve()
                if dest not in target.parents and target != dest:
                    raise CheckpointError(f"unsafe path {info.filename!r} in the zip; refusing to extract")
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(1 << 20):
                        total += len(chunk)
                        if total > max_total:
                            raise CheckpointError(f"the zip expands to more than {max_total / 1e6:.0f} MB "
                                                  "(a zip bomb?); refusing to extract")
                        out.write(chunk)
        except CheckpointError:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            shutil.rmtree(dest, ignore_errors=True)
            raise CheckpointError(f"the zip is damaged ({e}); download the checkpoint again") from None
    # A zip of a folder: use the folder that holds config.json.
    if not (dest / "config.json").exists():
        subs = [c.parent for c in dest.rglob("config.json")]
        if len(subs) == 1:
            return subs[0]
    return dest


def checkpoint_zip_bytes(bundle) -> bytes:
    """save_checkpoint to a temp dir, zipped in memory."""
    from bertcore.checkpoint import save_checkpoint

    with tempfile.TemporaryDirectory(prefix="bertx-save-") as d:
        save_checkpoint(bundle, d)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in sorted(Path(d).rglob("*")):
                if f.is_file():
                    zf.write(f, f.relative_to(d).as_posix())
        return buf.getvalue()


def load_uploaded_checkpoint(data: bytes, name: str = "checkpoint.zip"):
    """Safely extract and load an uploaded checkpoint zip; raises BertcoreError subclasses only."""
    from bertcore.checkpoint import load_checkpoint

    slot = session_tmp_dir() / f"upload-{int(time.time() * 1000)}"
    root = safe_extract_zip(data, slot)
    bundle = load_checkpoint(root)
    try:
        bundle.name = Path(name).stem or bundle.name
    except AttributeError:
        pass
    return bundle


def fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    s = int(round(s))
    return f"{s // 60}:{s % 60:02d}"
