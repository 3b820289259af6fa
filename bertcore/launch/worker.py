"""A training in its own process: a launch folder goes in, one event per JSON line comes out.

The explorer's server runs each training this way (``explorer.launch.training_run``), so a training has its own
interpreter lock and its own core: in a server process a training thread shares one lock with every page script
(docs/BENCH-HISTORY.md, "Trainings in their own processes").
Everything still goes through the one training route, ``bertcore.launch.service`` (``train`` / ``resume``).

``run_jobs`` trains a list of ``service.RunSpec`` one after the other and reports each event as a dict to a
``send`` function. The child calls it with ``send`` writing JSON lines on its stdout; a server that trains in a
thread (``BERTCORE_TRAINING_PROCESS=0``) calls it with ``send`` applying the event at once, so both ways fill a
run's records through the one relay (``TrainingRun._on_event``). The events::

    {"ev": "job", "job": i}                                  job i is being prepared
    {"ev": "start", "job": i, "run_dir", "runtime", "baseline", "probe", "probes", "history": {"from", "rows"},
     "skills": {"columns", "eval_keys", "from", "rows"} | null}  its run directory exists; rows so far
    {"ev": "rows", "job": i, "history": {"from", "rows"}, "probes"?, "skills"?}   new rows (at most every
                                                                 FLUSH_SECONDS, and after every evaluation)
    {"ev": "job_end", "job": i, "status", "reason", "error", "run_dir", "steps", "stop_step"}
                                                             (stop_step: the step a stop request found)
    {"ev": "evaluating", "job": i}                          a finished job with ``evaluate`` is being scored
    {"ev": "evaluated", "job": i, "run_dir", "evaluation" | "error"}   its evaluation.json (bertcore.lab.evaluate)
    {"ev": "done"}                                           every job ended
    {"ev": "error", "message"}                               bad input or a failure; nothing more follows

A row batch ``{"from": k, "rows": [...]}`` holds the rows from index ``k`` on; it always repeats the last row
sent before, because an evaluation may be merged into it (``History.update_last``); ``sync_rows`` applies it.

The parent writes the launch folder with ``write_job`` (no pickles: JSON, the tokenizer's own files and, for a
prepared initial model, a safetensors checkpoint; the ``Runtime`` the parent resolved, e.g. cuda:0 and bf16, as
its ``to_dict``, so every child of one server trains on the one GPU) and starts the child with ``spawn``
(``python -m bertcore.launch.worker FOLDER``). The child reads its stdin: a line ``stop REASON`` (``tell_stop``)
stops the current job (a resumable checkpoint is written, as for the Stop button); end of input (the server
went away) does the same.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported
from bertcore.analysis.records import TrainingRecords
from bertcore.errors import BertcoreError
from bertcore.io.checkpoint import atomic_write
from bertcore.finetune import route
from bertcore.finetune.spec import FinetuneSpec
from bertcore.launch import service
from bertcore.lab.evaluate import evaluate_run, record_finetune
from bertcore.training import runs
from bertcore.training.callbacks import Callbacks
from bertcore.training.device import Runtime
from bertcore.training.drive import STOPPED_BY_USER, StopSignal

LAUNCH_FILE = "launch.json"  # what the parent wrote for the child (not a BackgroundJob's job.json)
LOG_FILE = "worker.log"  # the child's stderr (a crash's last lines are shown to the user)
FLUSH_SECONDS = 0.25  # the Train page polls every 0.5 s: rows are sent at least twice as often
GONE = "stopped because the server went away"


# ----------------------------------------------------------------------------- parent: the launch folder
def write_job(folder: str | Path, jobs: list, parent: str | Path, nice: int = 0, threads: int = 1,
              runtime: Runtime | None = None) -> Path:
    """Write the launch folder for ``jobs``, each a ``service.RunSpec`` (its ``resume_from`` set: a resume) written
    by its own ``to_json``, so the child builds exactly what the parent holds. ``runtime``: where a resume goes
    on (a new run's RunSpec carries its own; None: the CPU at fp32)."""
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    entries = [job.to_json(d, i) for i, job in enumerate(jobs)]
    atomic_write(d / LAUNCH_FILE, json.dumps({"jobs": entries, "parent": str(parent), "nice": int(nice),
                                           "threads": int(threads),
                                           "runtime": runtime.to_dict() if runtime is not None else None},
                                          ensure_ascii=False, indent=1))
    return d


def spawn(folder: str | Path) -> subprocess.Popen:
    """Start ``python -m bertcore.launch.worker FOLDER``: its stdout is the event stream (``events``), its stdin
    takes ``tell_stop``, its stderr goes to the folder's log (``crash_text``)."""
    folder = Path(folder)
    root = str(Path(bertcore.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    with open(folder / LOG_FILE, "wb") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "bertcore.launch.worker", str(folder)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, env=env, text=True, encoding="utf-8", bufsize=1)


def events(proc: subprocess.Popen):
    """The child's events, one dict per JSON line, until it closes its stdout."""
    for line in proc.stdout:
        line = line.strip()
        if line:
            try:
                yield json.loads(line)
            except ValueError:
                continue


_STDIN_LOCK = threading.Lock()


def tell_stop(proc: subprocess.Popen, reason: str) -> None:
    """Ask the child to stop its current job (from any thread; nothing happens when it has ended)."""
    with _STDIN_LOCK:
        try:
            proc.stdin.write("stop " + " ".join(str(reason).split()) + "\n")
            proc.stdin.flush()
        except (OSError, ValueError):  # it has ended already
            pass


def finish(proc: subprocess.Popen, timeout: float | None = None) -> int:
    """Reap the child; its exit code."""
    rc = proc.wait(timeout)
    with _STDIN_LOCK, contextlib.suppress(OSError):
        proc.stdin.close()
    return rc


def crash_text(folder: str | Path) -> str:
    """The last line of the child's log (why it ended without saying so)."""
    try:
        lines = (Path(folder) / LOG_FILE).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def sync_rows(history, batch: dict) -> None:
    """Apply a row batch ``{"from": k, "rows": [...]}`` to ``history`` (a ``History``): rows it has are merged
    into its last one, the rest appended."""
    start = int(batch.get("from", 0))
    for k, row in enumerate(batch.get("rows", ())):
        idx = start + k
        if idx < len(history) - 1:
            continue
        if idx == len(history) - 1:
            history.update_last(row)
        else:
            history.append(row)


# ----------------------------------------------------------------------------- the jobs, in the child or a thread
def _batch(history, sent: int) -> dict:
    start = max(0, sent - 1)
    return {"from": start, "rows": history.rows_since(start)}


def _reporter(i: int, send, records: TrainingRecords, current: dict):
    """The callbacks that send job ``i``'s rows (at most every FLUSH_SECONDS, and after every evaluation), and
    ``flush(force)``, which sends what is new now. ``current["trainer"]``: the trainer once it started."""
    sent = {"rows": 0, "probes": 0, "skills": 0, "at": 0.0}

    def flush(force: bool = False) -> None:
        tr = current.get("trainer")
        if tr is None or (not force and time.monotonic() - sent["at"] < FLUSH_SECONDS):
            return
        sent["at"] = time.monotonic()
        msg: dict = {"ev": "rows", "job": i, "history": _batch(tr.history, sent["rows"])}
        sent["rows"] = len(tr.history)
        if len(records.probe_history) != sent["probes"] or force:
            msg["probes"] = list(records.probe_history)
            sent["probes"] = len(records.probe_history)
        sk = records.skills_history
        if sk is not None and (len(sk) != sent["skills"] or force):
            msg["skills"] = _batch(sk, sent["skills"])
            sent["skills"] = len(sk)
        send(msg)

    def on_start(ev) -> None:
        tr = current["trainer"] = ev.trainer
        sk = records.skills_history
        sent.update(rows=len(tr.history), probes=len(records.probe_history), skills=len(sk) if sk is not None else 0,
                    at=time.monotonic())
        send({"ev": "start", "job": i, "run_dir": str(ev.run_dir), "baseline": tr.unigram_baseline,
              "columns": list(tr.history.columns), "eval_keys": list(tr.history.eval_keys),
              "runtime": tr.runtime.label, "probe": records.probe.to_dict() if records.probe is not None else None,
              "probes": list(records.probe_history), "history": _batch(tr.history, 0),
              "skills": None if sk is None else {"columns": list(sk.columns), "eval_keys": list(sk.eval_keys),
                                                 **_batch(sk, 0)}})

    return Callbacks(start=on_start, step=lambda ev: flush(), eval=lambda ev: flush(force=True)), flush


_CURRENT_LOCK = threading.Lock()


def note_stop(current: dict, stop: StopSignal, reason: str) -> None:
    """A stop request: ``stop`` is set (the first reason kept) and ``current["stop_step"]`` is the step it found
    the trainer at (the job ends after the step under way)."""
    with _CURRENT_LOCK:
        if "stop_step" not in current:
            tr = current.get("trainer")
            current["stop_step"] = tr.step_count if tr is not None else 0
        stop.request(reason)


def run_jobs(specs: list, parent, send, stop: StopSignal, current: dict | None = None) -> None:
    """Train ``specs`` (``service.RunSpec``s; ``resume_from`` set: a resume) one after the other below ``parent``,
    reporting each event as a dict to ``send`` (the events in this module's docstring, "done" last). ``stop``
    ends the job under way (resumable) and skips the rest; ``current`` is where ``note_stop`` finds the trainer."""
    current = {} if current is None else current
    for i, spec in enumerate(specs):
        if stop.is_set():
            break
        send({"ev": "job", "job": i})
        if isinstance(spec, FinetuneSpec):
            _finetune_job(i, spec, parent, send, stop, current)
            continue
        records = TrainingRecords()  # the live probe's rows and the skills, filled by the training route
        callbacks, flush = _reporter(i, send, records, current)
        if spec.resume_from is not None and spec.evaluate and runs.read_run(spec.resume_from).status == "finished":
            info = runs.read_run(spec.resume_from)  # trained already: only its scores are missing
            send({"ev": "job_end", "job": i, "status": "finished", "reason": None, "error": None,
                  "run_dir": str(info.path), "steps": info.steps_done, "stop_step": None})
            _evaluate(i, info.path, send)
            continue
        if spec.resume_from is not None:
            result = service.resume(spec.resume_from, stop=stop, callbacks=callbacks, runtime=spec.runtime,
                                    records=records)
        else:
            result = service.train(spec, spec.run_dir, parent=parent, callbacks=callbacks, records=records,
                                   stop=stop)
        current["trainer"] = result.trainer
        flush(force=True)
        error = result.trainer.error or (result.reason if result.status == "failed" else None)
        with _CURRENT_LOCK:
            stop_step, current["trainer"] = current.pop("stop_step", None), None
        send({"ev": "job_end", "job": i, "status": result.status, "reason": result.reason, "error": error,
              "run_dir": str(result.run_dir), "steps": result.trainer.step_count, "stop_step": stop_step})
        if spec.evaluate and result.status == "finished" and not stop.is_set():
            _evaluate(i, result.run_dir, send)
        if error and not spec.evaluate:  # a study goes on with its other runs; a training's list ends here
            break
    send({"ev": "done"})


def _finetune_job(i: int, spec: FinetuneSpec, parent, send, stop: StopSignal, current: dict) -> None:
    """One fine-tune (``FinetuneSpec``) through the fine-tuning route, its rows sent as a pretraining's are, then its
    final held-out accuracy as its score (evaluation.json)."""
    sent = {"rows": 0, "at": 0.0}

    def flush(force: bool = False) -> None:
        tr = current.get("trainer")
        if tr is None or (not force and time.monotonic() - sent["at"] < FLUSH_SECONDS):
            return
        sent["at"] = time.monotonic()
        send({"ev": "rows", "job": i, "history": _batch(tr.history, sent["rows"])})
        sent["rows"] = len(tr.history)

    def on_start(ev) -> None:
        tr = current["trainer"] = ev.trainer
        sent.update(rows=len(tr.history), at=time.monotonic())
        send({"ev": "start", "job": i, "run_dir": str(ev.run_dir), "runtime": tr.runtime.label, "baseline": None,
              "columns": list(tr.history.columns), "eval_keys": list(tr.history.eval_keys),
              "labels_used": len(tr.examples), "history": _batch(tr.history, 0)})

    t0 = time.perf_counter()
    tuner = spec.tuner(Callbacks(start=on_start, step=lambda ev: flush(), eval=lambda ev: flush(force=True)))
    result = route.finetune(tuner, spec.run_dir, parent=parent, source=spec.source, name=spec.name, stop=stop)
    current["trainer"] = tuner
    flush(force=True)
    with _CURRENT_LOCK:
        stop_step, current["trainer"] = current.pop("stop_step", None), None
    error = tuner.error or (result.reason if result.status == "failed" else None)
    send({"ev": "job_end", "job": i, "status": result.status, "reason": result.reason, "error": error,
          "run_dir": str(result.run_dir), "steps": tuner.step_count, "stop_step": stop_step})
    if result.status == "finished":
        send({"ev": "evaluated", "job": i, "run_dir": str(result.run_dir),
              "evaluation": record_finetune(result.run_dir, tuner.eval_accuracy, time.perf_counter() - t0)})


def spec_from_json(e: dict, folder: Path, runtime: Runtime | None = None):
    """The job ``write_job`` wrote: a FinetuneSpec or a RunSpec."""
    if "finetune" in e:
        return FinetuneSpec.from_json(e, runtime)
    return service.RunSpec.from_json(e, folder, runtime=runtime)


def _evaluate(i: int, run_dir, send) -> None:
    """Score a finished run as the lab does and report it; a failure is reported, the jobs go on."""
    send({"ev": "evaluating", "job": i})
    try:
        send({"ev": "evaluated", "job": i, "run_dir": str(run_dir), "evaluation": evaluate_run(run_dir)})
    except Exception as e:  # noqa: BLE001 - one run's scores, never the study
        traceback.print_exc()
        msg = str(e) if isinstance(e, BertcoreError) else f"{type(e).__name__}: {e}"
        send({"ev": "evaluated", "job": i, "run_dir": str(run_dir), "error": f"evaluation failed: {msg}"})


def _line_writer(stream, gone):
    """The child's stdout as ``send``: one JSON object per line, from any thread. When nobody reads it any more
    (the server died), writing fails: ``gone(GONE)`` is called once and the rest is dropped, so the training
    still stops cleanly. ``send.dead`` says so."""
    lock = threading.Lock()

    def send(obj: dict) -> None:
        with lock:
            if send.dead:
                return
            try:
                stream.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
                stream.flush()
            except (OSError, ValueError):
                send.dead = True
        if send.dead:
            gone(GONE)

    send.dead = False
    return send


def child(folder: str | Path) -> int:
    """``python -m bertcore.launch.worker FOLDER``: train the folder's jobs, reporting on stdout."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything else printed goes to the log, never into the event stream
    folder = Path(folder)
    stop, current = StopSignal(), {}
    send = _line_writer(out, lambda reason: note_stop(current, stop, reason))

    def listen() -> None:
        for line in sys.stdin:
            if line.startswith("stop"):
                note_stop(current, stop, line[4:].strip() or STOPPED_BY_USER)
        note_stop(current, stop, GONE)

    try:
        job = json.loads((folder / LAUNCH_FILE).read_text(encoding="utf-8"))
        if int(job.get("nice", 0)) > 0:
            os.nice(int(job["nice"]))
        torch.set_num_threads(max(1, int(job.get("threads", 1))))
        threading.Thread(target=listen, name="bx-worker-stdin", daemon=True).start()
        runtime = Runtime.from_dict(job["runtime"]) if job.get("runtime") else None  # a resume's; None: CPU, fp32
        specs = [spec_from_json(e, folder, runtime) for e in job["jobs"]]
        run_jobs(specs, job["parent"], send, stop, current)
        if send.dead:  # the server that wrote the launch folder is gone: nobody else will remove it
            shutil.rmtree(folder, ignore_errors=True)
        return 0
    except Exception as e:  # noqa: BLE001 - the parent shows it as a message, never a traceback
        traceback.print_exc()  # to the log (worker.log)
        msg = str(e) if isinstance(e, BertcoreError) else f"training failed: {type(e).__name__}: {e}"
        send({"ev": "error", "message": msg})
        return 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("error: usage: python -m bertcore.launch.worker LAUNCH_FOLDER\n")
        sys.exit(2)
    sys.exit(child(sys.argv[1]))
