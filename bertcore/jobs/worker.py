"""A training in its own process: a job folder goes in, one JSON line per event comes out.

The explorer's server runs each training this way (``explorer.jobs.training_run``), so a training has its own
interpreter lock and its own core: in a server process a training thread and a hundred page scripts share one
lock, and the training got about a third of its solo speed (docs/BENCH.md, "Trainings in their own processes").
Everything still goes through the one training route, ``bertcore.jobs.service`` (``train`` / ``resume``),
in the child.

The parent writes the folder with ``write_job`` (no pickles: JSON, the tokenizer's own files and, for a prepared
initial model, a safetensors checkpoint; the ``Runtime`` the parent resolved, e.g. cuda:0 and bf16, as its
``to_dict``, so every child of one server trains on the one GPU) and starts ``TrainingProcess(folder)``, i.e.
``python -m bertcore.jobs.worker FOLDER``. The child trains the jobs one after the other and writes, on its
stdout, one JSON object per line::

    {"ev": "job", "job": i}                                  job i is being prepared
    {"ev": "start", "job": i, "run_dir", "runtime", "baseline", "probe", "probes", "history": {"from", "rows"},
     "skills": {"columns", "eval_keys", "from", "rows"} | null}  its run directory exists; rows so far
    {"ev": "rows", "job": i, "history": {"from", "rows"}, "probes"?, "skills"?}   new rows (at most every
                                                                 FLUSH_SECONDS, and after every evaluation)
    {"ev": "job_end", "job": i, "status", "reason", "error", "run_dir", "steps", "stop_step"}
                                                             (stop_step: the step a stop request found)
    {"ev": "done"}                                           every job ended
    {"ev": "error", "message"}                               bad input or a failure; nothing more follows

A row batch ``{"from": k, "rows": [...]}`` holds the rows from index ``k`` on; it always repeats the last row
sent before, because an evaluation may be merged into it (``History.update_last``); ``sync_rows`` applies it.
The child reads its stdin: a line ``stop REASON`` stops the current job (a resumable checkpoint is written, as
for the Stop button); end of input (the server went away) does the same.
"""
from __future__ import annotations

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
from bertcore.jobs import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.device import Runtime
from bertcore.training.drive import StopSignal

JOB_FILE = "job.json"
LOG_FILE = "worker.log"  # the child's stderr (a crash's last lines are shown to the user)
FLUSH_SECONDS = 0.25  # the Train page polls every 0.5 s: rows are sent at least twice as often
GONE = "stopped because the server went away"


# ----------------------------------------------------------------------------- parent: the job folder
def write_job(folder: str | Path, jobs: list, parent: str | Path, nice: int = 0, threads: int = 1,
              runtime: Runtime | None = None) -> Path:
    """Write the job folder for ``jobs``, each a ``service.RunSpec`` (its ``resume_from`` set: a resume) written
    by its own ``to_json``, so the child builds exactly what the parent holds. ``runtime``: where a resume goes
    on (a new run's RunSpec carries its own; None: the CPU at fp32)."""
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    entries = [job.to_json(d, i) for i, job in enumerate(jobs)]
    atomic_write(d / JOB_FILE, json.dumps({"jobs": entries, "parent": str(parent), "nice": int(nice),
                                           "threads": int(threads),
                                           "runtime": runtime.to_dict() if runtime is not None else None},
                                          ensure_ascii=False, indent=1))
    return d


class TrainingProcess:
    """The parent's handle on one child: ``events()`` yields its JSON lines, ``stop(reason)`` asks it to stop,
    ``wait()`` reaps it, ``crash_text()`` is the last line of its log when it ended without saying why."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        root = str(Path(bertcore.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self._log = open(self.folder / LOG_FILE, "wb")  # noqa: SIM115 - closed in wait()
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-m", "bertcore.jobs.worker", str(self.folder)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=env, text=True, encoding="utf-8", bufsize=1)

    def events(self):
        for line in self.proc.stdout:
            line = line.strip()
            if line:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue

    def stop(self, reason: str) -> None:
        with self._lock:
            try:
                self.proc.stdin.write("stop " + " ".join(str(reason).split()) + "\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):  # it has ended already
                pass

    def wait(self, timeout: float | None = None) -> int:
        rc = self.proc.wait(timeout)
        with self._lock:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self._log.close()
        return rc

    def crash_text(self) -> str:
        try:
            lines = (self.folder / LOG_FILE).read_text(encoding="utf-8", errors="replace").strip().splitlines()
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


# ----------------------------------------------------------------------------- child
class _Sender:
    """The child's stdout: one JSON object per line, from any thread. When nobody reads it any more (the server
    died), writing fails: ``gone`` is called once and the rest is dropped, so the training still stops cleanly."""

    def __init__(self, stream, gone):
        self.stream, self.gone = stream, gone
        self.lock = threading.Lock()
        self.dead = False

    def __call__(self, **obj) -> None:
        with self.lock:
            if self.dead:
                return
            try:
                self.stream.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                self.dead = True
        if self.dead:
            self.gone(GONE)


def _batch(history, sent: int) -> dict:
    start = max(0, sent - 1)
    return {"from": start, "rows": history.rows_since(start)}


class _Job:
    """What the child has sent of one job's records, and the callbacks that send the rest."""

    def __init__(self, i: int, send: _Sender):
        self.i, self.send = i, send
        self.trainer = None
        self.records = TrainingRecords()  # the live probe's rows and the skills, filled by the training route
        self.sent = self.sent_skills = self.sent_probes = 0
        self.last = 0.0

    def flush(self, force: bool = False) -> None:
        tr = self.trainer
        if tr is None or (not force and time.monotonic() - self.last < FLUSH_SECONDS):
            return
        self.last = time.monotonic()
        msg: dict = {"history": _batch(tr.history, self.sent)}
        self.sent = len(tr.history)
        rec = self.records
        if len(rec.probe_history) != self.sent_probes or force:
            msg["probes"] = list(rec.probe_history)
            self.sent_probes = len(rec.probe_history)
        if rec.skills_history is not None and (len(rec.skills_history) != self.sent_skills or force):
            msg["skills"] = _batch(rec.skills_history, self.sent_skills)
            self.sent_skills = len(rec.skills_history)
        self.send(ev="rows", job=self.i, **msg)

    def callbacks(self) -> Callbacks:
        def on_start(ev):
            tr = self.trainer = ev.trainer
            rec = self.records
            sk = rec.skills_history
            self.sent, self.sent_probes = len(tr.history), len(rec.probe_history)
            self.sent_skills = len(sk) if sk is not None else 0
            self.last = time.monotonic()
            self.send(ev="start", job=self.i, run_dir=str(ev.run_dir), baseline=tr.unigram_baseline,
                      runtime=tr.runtime.label,
                      probe=rec.probe.to_dict() if rec.probe is not None else None, probes=list(rec.probe_history),
                      history=_batch(tr.history, 0),
                      skills=None if sk is None else {"columns": list(sk.columns), "eval_keys": list(sk.eval_keys),
                                                      **_batch(sk, 0)})

        return Callbacks(start=on_start, step=lambda ev: self.flush(), eval=lambda ev: self.flush(force=True))


def _runtime(d: dict | None) -> Runtime | None:
    """The Runtime a job entry carries (None: the CPU at fp32, as a job file without one always meant)."""
    return Runtime.from_dict(d) if d else None


def child(folder: str | Path) -> int:
    """``python -m bertcore.jobs.worker FOLDER``: train the folder's jobs, reporting on stdout."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything else printed goes to the log, never into the event stream
    folder = Path(folder)
    stopped = threading.Event()
    state: dict = {"signal": None, "reason": None, "rec": None, "stop_step": None}
    state_lock = threading.Lock()

    def request(reason: str) -> None:
        with state_lock:
            if not stopped.is_set():
                state["reason"] = reason
                rec = state["rec"]  # the step the request found the trainer at (it ends after the next one)
                state["stop_step"] = rec.trainer.step_count if rec is not None and rec.trainer is not None else 0
            stopped.set()
            if state["signal"] is not None:
                state["signal"].request(state["reason"])

    send = _Sender(out, request)

    def listen() -> None:
        for line in sys.stdin:
            if line.startswith("stop"):
                request(line[4:].strip() or "stopped by the user")
        request(GONE)

    try:
        job = json.loads((folder / JOB_FILE).read_text(encoding="utf-8"))
        if int(job.get("nice", 0)) > 0:
            os.nice(int(job["nice"]))
        torch.set_num_threads(max(1, int(job.get("threads", 1))))
        threading.Thread(target=listen, name="bx-worker-stdin", daemon=True).start()
        for i, e in enumerate(job["jobs"]):
            if stopped.is_set():
                break
            send(ev="job", job=i)
            rec = _Job(i, send)
            stop = StopSignal()
            with state_lock:
                state["signal"], state["rec"] = stop, rec
                if stopped.is_set():
                    stop.request(state["reason"])
            spec = service.RunSpec.from_json(e, folder, rec.callbacks(), rec.records, _runtime(job.get("runtime")))
            if spec.resume_from is not None:
                result = service.resume(spec.resume_from, stop=stop, callbacks=spec.callbacks, runtime=spec.runtime,
                                        records=spec.records)
            else:
                result = service.train(spec, parent=job["parent"], stop=stop)
            rec.trainer = result.trainer
            rec.flush(force=True)
            error = result.trainer.error or (result.reason if result.status == "failed" else None)
            with state_lock:
                stop_step, state["rec"] = state["stop_step"], None
            send(ev="job_end", job=i, status=result.status, reason=result.reason, error=error,
                 run_dir=str(result.run_dir), steps=result.trainer.step_count, stop_step=stop_step)
            if error:
                break
        send(ev="done")
        if send.dead:  # the server that wrote the job folder is gone: nobody else will remove it
            shutil.rmtree(folder, ignore_errors=True)
        return 0
    except Exception as e:  # noqa: BLE001 - the parent shows it as a message, never a traceback
        traceback.print_exc()  # to the log (worker.log)
        msg = str(e) if isinstance(e, BertcoreError) else f"training failed: {type(e).__name__}: {e}"
        send(ev="error", message=msg)
        return 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("error: usage: python -m bertcore.jobs.worker JOB_FOLDER\n")
        sys.exit(2)
    sys.exit(child(sys.argv[1]))
