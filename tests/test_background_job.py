"""The one job base (bertcore.training.job.BackgroundJob): start, stop, the heartbeat, the end's order, the state
kept on disk, and that the training, the study runner (the Lab, Compare designs, the fine-tune comparison and its
label sweep) and the SAE jobs all use it."""
from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from conftest import TRAINING_END

from bertcore.errors import InputError
from bertcore.training.job import INTERRUPTED, JOB_FILE, BackgroundJob, read_state


class Steps(BackgroundJob):
    """Counts to ``n`` (or forever), one step per ``tick`` event, watching its stop signal between steps."""

    kind = "counting"

    def __init__(self, n=None, fail=None, **kw):
        super().__init__(**kw)
        self.n, self.fail, self.done = n, fail, 0
        self.tick = threading.Event()
        self.seen_at_exit = None

    def progress(self):
        return self.done / self.n if self.n else 0.0

    def work(self):
        self.set_status("running")
        while not self.stop_signal.is_set() and (self.n is None or self.done < self.n):
            if self.fail is not None and self.done == 2:
                raise self.fail
            self.done += 1
            self.tick.set()
            self.stop_signal.wait(0.01)


def test_a_finished_job_frees_its_slot_before_its_status_is_final_and_keeps_its_state(tmp_path):
    job = Steps(n=5, state_dir=tmp_path / "job")
    assert job.status == "idle" and not job.running
    job.start(on_exit=lambda: setattr(job, "seen_at_exit", job.status))
    assert job.join(TRAINING_END)
    assert job.seen_at_exit == "running"  # on_exit ran first, then the status became final
    assert (job.status, job.message, job.done, job.progress()) == ("finished", None, 5, 1.0)
    state = json.loads((tmp_path / "job" / JOB_FILE).read_text())
    assert (state["kind"], state["status"], state["progress"]) == ("counting", "finished", 1.0)
    assert read_state(tmp_path / "job")["status"] == "finished"


def test_stop_waits_for_the_end_and_the_first_reason_is_kept(tmp_path):
    job = Steps(state_dir=tmp_path).start()
    assert job.tick.wait(TRAINING_END)
    assert job.stop("stopped by the user", wait=TRAINING_END) is True  # True: ended once stop returned
    job.stop("a second reason")
    assert job.status == "stopped" and job.stop_signal.reason == "stopped by the user" and not job.running
    assert read_state(tmp_path)["status"] == "stopped"


def test_an_unwatched_job_abandons_itself_and_a_watched_one_does_not(tmp_path):
    watched = Steps(abandon_after=0.3).start()
    unwatched = Steps(abandon_after=0.3, state_dir=tmp_path).start()
    stop_polling = threading.Event()

    def poll():
        while not stop_polling.wait(0.05):
            watched.heartbeat()

    threading.Thread(target=poll, daemon=True).start()
    assert unwatched.join(TRAINING_END)
    assert unwatched.status == "abandoned" and unwatched.stop_signal.reason == BackgroundJob.abandoned_reason
    assert watched.running and watched.status == "running"  # polled all along: still at work
    stop_polling.set()
    watched.stop(wait=TRAINING_END)
    assert watched.status == "stopped"
    assert read_state(tmp_path)["status"] == "abandoned"


@pytest.mark.parametrize("error, want", [
    (InputError("lower the learning rate"), "lower the learning rate"),
    (RuntimeError("boom"), "counting failed: RuntimeError: boom"),
])
def test_a_failure_is_a_message_never_a_traceback(error, want, tmp_path):
    job = Steps(n=10, fail=error, state_dir=tmp_path).start()
    assert job.join(TRAINING_END)
    assert (job.status, job.message) == ("error", want)
    state = read_state(tmp_path)
    assert (state["status"], state["message"]) == ("error", want) and "Traceback" not in state["message"]


def test_a_job_whose_process_is_gone_reads_as_interrupted(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(gone.stdout)  # a process that has ended
    (tmp_path / JOB_FILE).write_text(json.dumps({"kind": "SAE training", "status": "running", "pid": pid}))
    assert read_state(tmp_path)["status"] == "stopped" and read_state(tmp_path)["message"] == INTERRUPTED
    (tmp_path / JOB_FILE).write_text("{broken")
    assert read_state(tmp_path) is None
    assert read_state(tmp_path / "missing") is None


def test_every_background_job_of_the_explorer_is_one_of_these():
    from explorer.launch.sae_jobs import SAEJob
    from explorer.launch.study_run import StudyRun
    from explorer.launch.training_run import TrainingRun

    for cls in (TrainingRun, StudyRun, SAEJob):
        assert issubclass(cls, BackgroundJob), cls
        for own in ("start", "stop", "join", "running", "_main", "_watch"):  # the control is the base's alone
            # (a training and a study take their slots in start, then call the base's)
            assert own not in vars(cls) or own == "start" and cls in (TrainingRun, StudyRun), (cls, own)
