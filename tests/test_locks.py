"""Runs shared by several server processes (docs/REPLICAS.md): a run's lock excludes every other process and
thread, dies with its process (SIGKILL included), and decides whether a run is live rather than a pid; two
processes resuming one run at once train it once; workspace.json written by two processes at once loses nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bertcore.config import BertConfig, TrainConfig
from bertcore.errors import InputError
from bertcore.io.checkpoint import load_checkpoint
from bertcore.training import locks, runs
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict:
    """The subprocesses' environment, read when called: BERTCORE_RUNS_DIR is the test's (conftest)."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def tiny_spec(steps=300, name="shared"):
    bert = BertConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1,
                      max_position_embeddings=32)
    tc = TrainConfig(steps=steps, batch_size=4, eval_every=20, eval_size=4, snapshot_every=100, max_seq_len=16,
                     warmup_steps=1, seed=5)
    return service.RunSpec(bert, tc, corpus="tutorial", name=name)


def stopped_run(parent: Path, at: int, steps: int = 300) -> Path:
    stop = StopSignal()
    spec = tiny_spec(steps)
    cb = Callbacks(step=lambda ev: stop.request() if ev.trainer.step_count == at else None)
    return service.train(spec, parent / "run", stop=stop, callbacks=cb).run_dir


def test_a_run_lock_excludes_processes_and_threads_and_dies_with_its_process(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    assert locks.is_held(d) is None  # never locked: no lock file
    code = ("import sys, time\nfrom bertcore.training import locks\nlocks.hold(sys.argv[1])\n"
            "print('held', flush=True)\ntime.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(d)], stdout=subprocess.PIPE, env=env(), cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == b"held"
        assert locks.is_held(d) is True
        with pytest.raises(locks.RunBusy, match=f"pid {p.pid} on "):
            locks.hold(d)
        assert isinstance(locks.RunBusy("x"), InputError)  # the CLI's `error: ...`, the app's message box
    finally:
        p.kill()  # SIGKILL: no clean-up runs, the kernel drops the lock
        p.wait(30)
    assert locks.is_held(d) is False
    locks.hold(d)
    assert locks.held_here(d) and locks.is_held(d) is True
    with pytest.raises(locks.RunBusy):  # a second holder in the same process (another thread) is refused too
        locks.hold(d)
    locks.release(d)
    assert not locks.held_here(d) and locks.is_held(d) is False


def test_the_lock_not_the_pid_says_whether_a_run_trains(tmp_path):
    """A pid means nothing on another machine: a run whose lock nobody holds is interrupted, whatever its pid."""
    d = stopped_run(tmp_path, at=10, steps=30)
    runs.update_run_json(d, status="running", pid=1)  # pid 1 is alive (init) but does not train it
    info = runs.read_run(d)
    assert (info.status, info.resumable) == ("stopped", True) and "interrupted at step 10" in info.reason
    locks.hold(d)  # another replica trains it now: held, and not by a resume of this process ...
    try:
        code = "import sys\nfrom bertcore.training import runs\nprint(runs.read_run(sys.argv[1]).status)\n"
        seen = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, env=env(), cwd=ROOT,
                              timeout=120)
        assert seen.stdout.strip() == "running", seen.stderr  # ... as another process sees it
        with pytest.raises(InputError, match="still training"):
            runs.delete_run(d, root=tmp_path)
    finally:
        locks.release(d)
    assert runs.read_run(d).status == "stopped"


def test_a_run_training_in_a_thread_is_running_for_another_process_and_cannot_be_resumed_twice(tmp_path):
    d = stopped_run(tmp_path, at=20)
    started, gate, stop = threading.Event(), threading.Event(), StopSignal()
    result = {}

    def pause(ev):  # the training waits at step 40 (just checkpointed) until the checks are done
        if ev.trainer.step_count == 40:
            started.set()
            gate.wait(300)

    def go():
        result["r"] = service.resume(d, stop=stop, callbacks=Callbacks(step=pause))

    t = threading.Thread(target=go)
    t.start()
    try:
        assert started.wait(120)
        code = "import sys\nfrom bertcore.training import runs\nprint(runs.read_run(sys.argv[1]).summary())\n"
        seen = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, env=env(), cwd=ROOT,
                              timeout=120)
        assert seen.stdout.startswith("running, step "), seen.stderr
        with pytest.raises(InputError, match="still training|being trained right now"):
            service.resume(d)
    finally:
        stop.request()
        gate.set()
        t.join(120)
    assert result["r"].status == "stopped" and runs.read_run(d).resumable


_RACER = """
import sys, time
from bertcore.cli import main
from bertcore.launch import service  # torch imported before the start line, so both start together
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
sys.exit(main(["train", "--resume", sys.argv[1], "--quiet"]))
"""


def test_two_processes_resuming_one_run_at_once_train_it_once(tmp_path):
    """Replica A's Resume and replica B's Resume pressed together: one trains the run to its end, the other is
    refused with `error: ...` (exit 2), and the history has every step exactly once."""
    d = stopped_run(tmp_path, at=8)
    start = time.time() + 15
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(d), str(start)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env(), cwd=ROOT) for _ in range(2)]
    outs = [p.communicate(timeout=400) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], outs
    loser = outs[codes.index(2)][1]
    assert loser.startswith("error: ") and "Traceback" not in loser, loser
    assert "being trained right now" in loser or "still training" in loser, loser
    info = runs.read_run(d)
    assert (info.status, info.steps_done) == ("finished", 300)
    assert list(load_checkpoint(d).history.step) == list(range(1, 301))


_WRITER = """
import sys, time
from bertcore.training import runs
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
for i in range(100):
    runs.write_workspace(sys.argv[1], **{f"{sys.argv[2]}{i}": i})
"""


def test_workspace_json_written_by_two_processes_at_once_keeps_every_change():
    """Two replicas writing one workspace.json at the same moment (without the lock about a fifth of the changes
    were lost here: 157 of 200 keys)."""
    ws = runs.new_workspace_id()
    runs.workspace_dir(ws)
    start = time.time() + 15
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, ws, tag, str(start)], env=env(), cwd=ROOT)
             for tag in ("a", "b")]
    assert [p.wait(120) for p in procs] == [0, 0]
    data = json.loads((runs.workspace_dir(ws) / runs.WORKSPACE_FILE).read_text())
    assert data == {f"{t}{i}": i for t in ("a", "b") for i in range(100)}
