"""A bad day loses nothing: weights holding NaN or inf are refused with a message (checkpoint, run list, replay
step, CLI, sidebar), and a disk that fills while a checkpoint is written keeps the previous one loadable, marks
the run failed with the reason and lets it resume to the same result as an uninterrupted run."""
from __future__ import annotations

import errno
import hashlib
import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.errors import CheckpointError
from bertcore.io import checkpoint as ck
from bertcore.io.checkpoint import load_checkpoint
from bertcore.io.steps import list_steps, load_step, step_path
from bertcore.training import runs
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.resume import read_resume_step

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus(seed=0, n_pairs=300)


def spec(corpus, steps=30, name="r"):
    bert = BertConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2,
                      max_position_embeddings=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    tc = TrainConfig(steps=steps, batch_size=8, eval_every=5, eval_size=16, snapshot_every=5, max_seq_len=32,
                     warmup_steps=4, seed=3)
    return service.RunSpec(bert, tc, corpus=corpus, name=name)


def poison(path: Path, value: float, name: str | None = None) -> str:
    """Put ``value`` into one weight of a safetensors file (as a damaged disk or a hand edit would); its name."""
    w = load_file(str(path))
    name = name or sorted(k for k, v in w.items() if v.is_floating_point() and v.dim() == 2)[0]
    w[name] = w[name].clone()
    w[name].view(-1)[3] = value
    save_file(w, str(path), metadata={"format": "pt"})
    return name


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ NaN / inf weights
@pytest.mark.parametrize("value,words", [(float("nan"), "NaN values"), (float("inf"), "infinite values"),
                                         (float("-inf"), "infinite values")])
def test_nonfinite_weights_are_refused_with_a_message(corpus, tmp_path, capsys, value, words):
    d = service.train(spec(corpus, steps=10), tmp_path / "run").run_dir
    good = load_checkpoint(d)
    name = poison(d / "model.safetensors", value)
    with pytest.raises(CheckpointError, match=f"holds {words} in 1 of its") as e:
        load_checkpoint(d)
    assert name in str(e.value) and "train again" in str(e.value)
    info = runs.read_run(d)  # the run list: damaged with the reason, never offered as a model
    assert info.status == "damaged" and not info.loadable and words in info.damaged
    assert info.summary().startswith(f"damaged: model.safetensors holds {words}")
    for argv in (["fill-mask", str(d), "the [MASK] eats ."], ["nsp", str(d), "a cat .", "it eats ."],
                 ["train", "--resume", str(d)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and "Traceback" not in err, (argv, err)
    # a replay step with a NaN is refused the same way; the run's other steps still load
    s = list_steps(d)[1]
    poison(step_path(d, s), value)
    save_file({k: v.contiguous() for k, v in ck.unique_state_dict(good.model).items()}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    assert runs.read_run(d).loadable  # the same file name, a new version: read again, not from the cache
    with pytest.raises(CheckpointError, match=f"step_{s:06d}.safetensors holds {words}"):
        load_step(d, s)
    assert torch.isfinite(load_step(d, list_steps(d)[0]).model.bert.embeddings.word_embeddings.weight).all()


def test_a_nan_run_is_marked_damaged_in_the_sidebar_and_the_good_run_stays_usable(corpus):
    from streamlit.testing.v1 import AppTest

    ws = runs.new_workspace_id()
    parent = runs.workspace_dir(ws)
    service.train(spec(corpus, steps=10, name="good run"), parent=parent)
    bad = service.train(spec(corpus, steps=10, name="nan run"), parent=parent).run_dir
    poison(bad / "model.safetensors", float("nan"))
    runs.write_workspace(ws, active=f"run:{bad.name}")  # the workspace's active model is the damaged one

    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params["ws"] = ws
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = " ".join(w.value for w in at.sidebar.warning)
    assert "could not be loaded" in warnings and "NaN values" in warnings, warnings
    assert "fresh untrained" in at.sidebar.markdown[0].value  # not shown as a working model
    switch = next(b for b in at.sidebar.selectbox if b.label == "Switch model")
    assert "good run" in switch.options and "nan run" not in switch.options
    listed = at.sidebar.selectbox(key="sb_run").options
    assert any(o.startswith("nan run — damaged: model.safetensors holds NaN values") for o in listed), listed
    assert any(o.startswith("good run — finished") for o in listed), listed
    at.sidebar.selectbox(key="sb_run").set_value(bad.name).run()
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "damaged: model.safetensors holds NaN values" in captions
    assert not [b for b in at.sidebar.button if b.key in ("sb_run_use", "sb_run_resume")]
    next(b for b in at.sidebar.selectbox if b.label == "Switch model").set_value("good run").run()
    assert not at.exception
    assert at.sidebar.markdown[0].value == "**Active model:** good run"


# ------------------------------------------------------------------ a full disk while a checkpoint is written
class _FullDisk(io.RawIOBase):
    """A file that takes half of what is written, then fails as a full disk does (ENOSPC)."""

    def __init__(self, f):
        self.f = f

    def write(self, data) -> int:
        self.f.write(bytes(data)[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.f.fileno()

    def close(self) -> None:
        self.f.close()
        super().close()


def fill_disk_when(monkeypatch, file_name: str, full: dict) -> None:
    """While ``full["on"]``, writing a file named ``file_name`` (through atomic_write's temp file) hits a full disk."""
    real = os.fdopen

    def fdopen(fd, *args, **kwargs):
        f = real(fd, *args, **kwargs)
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        except OSError:
            return f
        if full["on"] and target.startswith(f".{file_name}.") and target.endswith(".tmp"):
            return _FullDisk(f)
        return f

    monkeypatch.setattr(ck.os, "fdopen", fdopen)


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    """The same run as the tests below, never meeting a full disk: (history frame, final model)."""
    res = service.train(spec(corpus), tmp_path_factory.mktemp("uninterrupted") / "run")
    return res.trainer.history.frame(), load_checkpoint(res.run_dir).model


@pytest.mark.parametrize("file_name", ["model.safetensors", "resume.safetensors", "run.json"])
def test_a_full_disk_mid_checkpoint_keeps_the_previous_one_and_the_run_resumes(corpus, uninterrupted, tmp_path,
                                                                               monkeypatch, file_name):
    full, kept = {"on": False}, {}

    def on_checkpoint(ev):  # the disk fills after the checkpoint of step 5: the one after step 10 fails
        kept.update(step=ev.meta["steps_done"], sha=sha(ev.run_dir / "model.safetensors"),
                    resume=sha(ev.run_dir / "resume.safetensors"))
        full["on"] = ev.meta["steps_done"] >= 5

    fill_disk_when(monkeypatch, file_name, full)
    s = spec(corpus)
    d = tmp_path / "r"
    res = service.train(s, d, callbacks=Callbacks(checkpoint=on_checkpoint))
    full["on"] = False
    assert kept["step"] == 5 and res.trainer.step_count == 10  # it stopped at the failed write: nothing after
    assert not [p.name for p in d.rglob("*.tmp")]  # the half-written temp file is gone
    if file_name == "run.json":  # everything else of step 10 was written, complete: the resume state too
        assert read_resume_step(d / "resume.safetensors") == 10
    else:
        assert sha(d / "resume.safetensors") == kept["resume"]  # the resume state of step 5, as it was
    b = load_checkpoint(d)  # the previous checkpoint loads (model.safetensors: step 5's, or a complete newer one)
    assert all(torch.isfinite(p).all() for p in b.model.parameters())
    if file_name == "model.safetensors":
        assert sha(d / "model.safetensors") == kept["sha"]
    info = runs.read_run(d)
    if file_name == "run.json":  # not even run.json could be written: it still says running, so it reads as cut off
        assert res.status == "failed" and info.status == "stopped" and "interrupted" in info.reason
    else:
        assert (res.status, info.status, info.steps_done) == ("failed", "failed", 5)
        assert "could not write the checkpoint after step 10 (No space left on device)" in info.reason
        assert "checkpoint of step 5 is kept" in info.reason and "resume" in info.reason
    assert info.resumable and info.damaged is None

    again = service.resume(d)  # disk space freed: it continues from the last complete checkpoint
    assert again.status == "finished"
    (h1, model), h2 = uninterrupted, again.trainer.history.frame()
    assert list(h2.step) == list(range(1, 31))
    for c in ("mlm_loss", "nsp_loss", "lr"):  # the same as a run that never met a full disk
        np.testing.assert_allclose(h2[c].to_numpy(), h1[c].to_numpy(), atol=1e-5, rtol=0, err_msg=c)
    for (n, p1), p2 in zip(model.state_dict().items(), load_checkpoint(d).model.state_dict().values()):
        torch.testing.assert_close(p2, p1, atol=1e-5, rtol=0, msg=n)


def test_a_full_disk_through_the_cli_and_the_app_runner(corpus, tmp_path, monkeypatch, capsys):
    """The CLI says `error: ...` with the way to resume; the app's runner shows the reason as the job's error."""
    from explorer.launch.training_run import TrainingRun

    full = {"on": False}
    fill_disk_when(monkeypatch, "model.safetensors", full)
    full["on"] = True  # full from the start: not even the first checkpoint can be written
    out = tmp_path / "cli"
    code = main(["train", "--out", str(out), "--steps", "20", "--quiet", "--set", "hidden_size=16", "--set",
                 "num_attention_heads=2", "--set", "intermediate_size=32", "--set", "batch_size=4"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: could not write the checkpoint after step 0 (No space left")
    assert f"--resume {out}" in err and "Traceback" not in err

    from bertcore.analysis import records
    from bertcore.launch import service as svc

    s = spec(corpus, steps=30)
    # the pretraining run's files are written by its records (TrainingRecords.save): step 0, 5, then full
    monkeypatch.setattr(records, "save_checkpoint", _fail_after(ck.save_checkpoint, 2, full))
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0")  # the patched save is in this process: train in a thread
    run = TrainingRun([svc.RunSpec(s.model_config, s.train_config, corpus=corpus, name="full disk")], runs_dir=tmp_path / "ws",
                      abandon_after=600)
    run.start()
    assert run.join(300)
    snap = run.snapshot()
    assert snap.status == "finished" and snap.errors[0] and "No space left on device" in snap.errors[0]
    info = runs.read_run(snap.run_dirs[0])
    assert info.status == "failed" and info.resumable and info.steps_done == 5


def _fail_after(save, n: int, full: dict):
    """save_checkpoint that hits a full disk from its ``n``-th call on (the file written half, then ENOSPC)."""
    calls = {"n": 0}

    def wrapped(bundle, directory):
        calls["n"] += 1
        full["on"] = calls["n"] > n
        return save(bundle, directory)

    return wrapped


def test_a_run_failed_on_a_full_disk_is_resumed_from_the_sidebar(corpus, monkeypatch):
    """The sidebar names the failure and offers Resume; the Train page follows the resumed run (its summary and
    Stop), and the run finishes with every step once."""
    from streamlit.testing.v1 import AppTest

    from explorer.launch import launcher

    monkeypatch.setenv("BERTCORE_ABANDON_SECONDS", "600")  # AppTest runs no fragment timers: no heartbeat
    ws = runs.new_workspace_id()
    full = {"on": False}
    fill_disk_when(monkeypatch, "model.safetensors", full)
    s = spec(corpus, name="full disk")
    cb = Callbacks(checkpoint=lambda ev: full.update(on=ev.meta["steps_done"] >= 5))
    d = service.train(s, parent=runs.workspace_dir(ws), callbacks=cb).run_dir
    full["on"] = False
    assert runs.read_run(d).resumable

    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params["ws"] = ws
    at.run()
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "failed, 5/30 steps" in captions and "No space left on device" in captions, captions
    at.sidebar.button(key="sb_run_resume").click().run()
    assert not at.exception
    at.switch_page("app_pages/train.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not at.button(key="train_stop").disabled  # it trains, in this session
    run = at.session_state[launcher._K_RUN]
    assert run.join(300)
    info = runs.read_run(d)
    assert (info.status, info.steps_done) == ("finished", 30)
    assert list(load_checkpoint(d).history.step) == list(range(1, 31))


def test_the_finite_check_is_exact():
    """A float32 sum decides quickly; huge finite weights whose sum overflows are confirmed finite, and one NaN
    or inf anywhere (also in float16, also where +inf and -inf meet) is found."""
    huge = torch.full((1000,), 3e38)  # finite, but its float32 sum is inf
    assert not torch.isfinite(huge.sum()) and ck.nonfinite_problem({"w": huge}) is None
    half = torch.full((4000,), 60000.0).half()  # finite float16 whose float16 sum would overflow
    assert ck.nonfinite_problem({"w": half}) is None
    for value, words in ((float("nan"), "NaN values"), (float("inf"), "infinite values")):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            w = torch.zeros(100, dtype=dtype)
            w[57] = value
            assert words in ck.nonfinite_problem({"ok": torch.ones(3), "w": w}), (value, dtype)
    both = torch.tensor([float("inf"), float("-inf"), 1.0])
    assert "infinite values in 1 of its 2" in ck.nonfinite_problem({"ok": torch.ones(3), "w": both})
    mixed = {"a": torch.tensor([float("nan")]), "b": torch.tensor([float("inf")]), "c": torch.ones(2)}
    assert "NaN and infinite values in 2 of its 3 weights (e.g. a, b)" in ck.nonfinite_problem(mixed)
    assert ck.nonfinite_problem({"ids": torch.arange(5)}) is None  # integer tensors are not weights to check
