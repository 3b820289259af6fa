"""A training in its own process (bertcore.launch.worker, explorer.launch.training_run with BERTCORE_TRAINING_PROCESS=1):
the same run as in a thread, every row relayed once, stop / a crash / a vanished server handled, no pickles."""
from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import TRAINING_END
from conftest import TRAINING_RUNS as RUNS  # stopped after each test by conftest

from bertcore.analysis.live_probe import Probe
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import Corpus, builtin_corpus
from bertcore.data.tokenization import WordPieceTokenizer, WordTokenizer
from bertcore.model.bert import init_model
from bertcore.training import runs
from bertcore.launch import service, worker
from bertcore.launch.service import RunSpec
from bertcore.training.history import History
from explorer import server_process
from explorer.launch import training_slots
from explorer.launch.training_run import TrainingRun

SKILLS_CSV = b"text,right,wrong\nthe cat [MASK] the fish .,eats,eat\n"


@pytest.fixture(scope="module")
def data():
    base = builtin_corpus(seed=3, n_pairs=400)
    # an uploaded-like corpus: not rebuildable from a spec, with documents, so its pairs travel as a file
    corpus = Corpus("my notes", list(base.pairs), "a user's corpus", {"lang": "en"}, [i // 20 for i in range(400)])
    tok = WordTokenizer.build(corpus.texts())
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                     num_hidden_layers=2, max_position_embeddings=64)
    return corpus, tok, cfg


def _tc(steps=12, **kw):
    return TrainConfig(**{"steps": steps, "batch_size": 8, "max_seq_len": 32, "eval_every": 5, "eval_size": 16,
                          "warmup_steps": 2, **kw})


def _train(monkeypatch, where: str, jobs, corpus, tok, tmp: Path, **kw) -> TrainingRun:
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "1" if where == "process" else "0")
    jobs = [j if j.resume_from is not None else replace(j, corpus=corpus, tokenizer=tok or "word") for j in jobs]
    r = TrainingRun(jobs, runs_dir=tmp / where, abandon_after=600, **kw)
    RUNS.append(r)
    r.start()
    assert r.join(300), "the run did not end"
    return r


def test_a_run_in_its_own_process_equals_the_run_in_a_thread(data, tmp_path, monkeypatch):
    """Same seed, same corpus object, tokenizer, probe and the user's skill items: the child trains bit for bit what
    a thread trains (weights, every history row once, probe rows, skills), and the parent sees all of it."""
    corpus, tok, cfg = data
    probe = Probe("the cat [MASK] the fish .", "the cat eats .", "it sleeps .")
    job = RunSpec(cfg, _tc(), name="same", probe=probe, skill_csv=("mine.csv", SKILLS_CSV), defaults={"why": "test"})
    torch.set_num_threads(1)  # the child trains with one thread: so does the thread here
    a = _train(monkeypatch, "thread", [job], corpus, tok, tmp_path)
    b = _train(monkeypatch, "process", [job], corpus, tok, tmp_path)
    sa, sb = a.snapshot(), b.snapshot()
    assert sa.status == sb.status == "finished" and sa.errors == sb.errors == [None]
    assert not a.in_process and b.in_process
    fa, fb = sa.histories[0].frame(), sb.histories[0].frame()
    assert fb["step"].tolist() == list(range(1, 13))  # every row once, in order
    cols = ["mlm_loss", "nsp_loss", "lr", "eval_mlm_loss", "eval_nsp_acc"]
    assert fa[cols].equals(fb[cols])
    for k, v in a.results[0].model.state_dict().items():
        assert torch.equal(v, b.results[0].model.state_dict()[k]), k
    assert b.results[0].run_dir == sb.run_dirs[0] and sb.run_dirs[0].parent == tmp_path / "process"
    assert [r["top1"] for r in sa.probes[0]] == [r["top1"] for r in sb.probes[0]] and len(sb.probes[0]) == 4
    assert b.probe_objects[0] == probe and sa.baselines == sb.baselines
    assert sa.skills[0].frame().drop(columns="seconds").equals(sb.skills[0].frame().drop(columns="seconds"))
    assert sb.skills[0].columns == ("step", "seconds", "own:mine")  # the user's items, scored in the child
    meta = runs.read_run_json(sb.run_dirs[0])
    assert meta["corpus"] == "my notes" and meta["corpus_spec"] == "run:corpus.tsv"
    assert meta["corpus_defaults"] == {"why": "test"}
    assert (sb.run_dirs[0] / "corpus_documents.txt").read_text().split()[:21] == ["0"] * 20 + ["1"]


def test_prepared_models_and_a_wordpiece_tokenizer_travel_as_files(data, tmp_path, monkeypatch):
    """Compare's jobs (two prepared initial models, one run) with a WordPiece tokenizer: each child job starts from
    exactly the model it was given; the job folder holds JSON, safetensors and text, never a pickle."""
    corpus, _, cfg = data
    tok = WordPieceTokenizer.train(corpus.texts(), vocab_size=300)
    cfg = cfg.replace(vocab_size=tok.vocab_size)
    models = [init_model(cfg, seed) for seed in (5, 6)]
    folder = tmp_path / "job"
    specs = [service.RunSpec(cfg, _tc(steps=3), corpus=corpus, tokenizer=tok, model=m, name=f"m{k}", probe=None)
             for k, m in enumerate(models)]
    worker.write_job(folder, specs, tmp_path / "out")
    kinds = {p.suffix for p in folder.rglob("*") if p.is_file()}
    assert kinds <= {".json", ".safetensors", ".txt"}, kinds
    job = json.loads((folder / worker.LAUNCH_FILE).read_text())
    assert [e["tokenizer"]["kind"] for e in job["jobs"]] == ["wordpiece", "wordpiece"]
    for e, m in zip(job["jobs"], models):
        spec = service.RunSpec.from_json(e, folder)
        assert spec.tokenizer.vocab == tok.vocab
        for k, v in m.state_dict().items():
            assert torch.equal(spec.model.state_dict()[k], v), k

    jobs = [RunSpec(cfg, _tc(steps=3), name=f"m{k}", probe=None, model=m) for k, m in enumerate(models)]
    r = _train(monkeypatch, "process", jobs, corpus, tok, tmp_path)
    s = r.snapshot()
    assert s.status == "finished" and [len(h) for h in s.histories] == [3, 3] and s.total_done == 6
    assert len({str(d) for d in s.run_dirs}) == 2 and all(b is not None for b in r.results)
    assert all(runs.read_run(d).status == "finished" for d in s.run_dirs)


def test_bad_input_a_crash_and_a_failed_run_are_messages(data, tmp_path, monkeypatch):
    corpus, tok, cfg = data
    # bad input found in the child (max_seq_len over the model's positions): the service's own message
    r = _train(monkeypatch, "process", [RunSpec(cfg, _tc(max_seq_len=128), name="bad")], corpus, tok, tmp_path)
    s = r.snapshot()
    assert s.status == "error" and "max_seq_len" in s.message and "Traceback" not in s.message
    # a diverging run: failed with the trainer's reason, its last good weights loadable
    r = _train(monkeypatch, "process", [RunSpec(cfg, _tc(steps=40, lr=50.0), name="diverges")], corpus, tok, tmp_path)
    s = r.snapshot()
    assert s.errors[0] and "lr" in s.errors[0] and r.results[0] is not None
    assert runs.read_run(s.run_dirs[0]).status == "failed"
    # the child killed mid-run: an error that says so, never a hang
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "1")
    r = TrainingRun([RunSpec(cfg, _tc(steps=100000), corpus=corpus, tokenizer=tok, name="killed")],
                    runs_dir=tmp_path / "k", abandon_after=600)
    RUNS.append(r)
    r.start()
    t0 = time.time()
    while r.snapshot().total_done < 2 and time.time() - t0 < 120:
        time.sleep(0.05)
    os.kill(r._proc.pid, signal.SIGKILL)
    assert r.join(TRAINING_END)
    s = r.snapshot()
    assert s.status == "error" and "ended unexpectedly" in s.message and "-9" in s.message
    assert training_slots.running_trainings() == 0  # its slot is free again


def test_the_server_going_away_leaves_a_resumable_run(data, tmp_path):
    """End of the child's input (the server process died): the child stops like the Stop button, with a resumable
    checkpoint, and a resume continues from it."""
    corpus, tok, cfg = data
    folder = tmp_path / "job"
    worker.write_job(folder, [service.RunSpec(cfg, _tc(steps=100000), corpus=corpus, tokenizer=tok)], tmp_path / "out")
    proc = worker.spawn(folder)
    seen = 0
    for ev in worker.events(proc):
        if ev["ev"] == "rows":
            seen = ev["history"]["rows"][-1]["step"]
            if seen >= 3:
                proc.stdin.close()  # what the kernel does when the server is killed
                break
    rest = list(worker.events(proc))
    assert worker.finish(proc, 60) == 0
    end = next(e for e in rest if e["ev"] == "job_end")
    assert end["status"] == "stopped" and end["reason"].startswith(worker.GONE) and end["stop_step"] >= seen
    info = runs.read_run(Path(end["run_dir"]))
    assert info.status == "stopped" and info.resumable and info.steps_done == end["steps"]
    r = TrainingRun([RunSpec(None, _tc(steps=100000), name="again", resume_from=Path(end["run_dir"]))],
                    runs_dir=tmp_path / "out", abandon_after=600)
    RUNS.append(r)
    r.start()
    t0 = time.time()
    while r.snapshot().total_done < end["steps"] + 2 and time.time() - t0 < 120:
        time.sleep(0.05)
    assert r.stop(wait=TRAINING_END)  # its end is an event: waited for, with a deadline for this machine
    steps = r.snapshot().histories[0].frame()["step"].tolist()
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= end["steps"] + 2  # continued, each step once


def test_sync_rows_merges_the_repeated_last_row():
    h = History.pretraining()
    worker.sync_rows(h, {"from": 0, "rows": [{"step": 1, "mlm_loss": 3.0}, {"step": 2, "mlm_loss": 2.0}]})
    worker.sync_rows(h, {"from": 1, "rows": [{"step": 2, "mlm_loss": 2.0, "eval_mlm_loss": 2.5, "eval_nsp_acc": 0.5},
                                             {"step": 3, "mlm_loss": 1.0}]})
    f = h.frame()
    assert f["step"].tolist() == [1, 2, 3] and f["eval_mlm_loss"].tolist()[1] == 2.5 and h.n_evals == 1
    worker.sync_rows(h, {"from": 0, "rows": [{"step": 1, "mlm_loss": 9.0}]})  # old rows are not rewritten
    assert h.frame()["mlm_loss"].tolist() == [3.0, 2.0, 1.0]


def test_the_setting_is_checked(monkeypatch):
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "yes")
    with pytest.raises(Exception, match="BERTCORE_TRAINING_PROCESS"):
        training_slots.own_process()
    monkeypatch.setenv("BERTCORE_TRAINING_PROCESS", "0")
    assert training_slots.own_process() is False
    monkeypatch.delenv("BERTCORE_TRAINING_PROCESS")
    assert training_slots.own_process() is True


_TUNE = """
import gc, sys, torch
from explorer import server_process
server_process.tune_server_process()
server_process.tune_server_process()  # once per process
print(torch.get_num_threads(), sys.getswitchinterval(), gc.get_freeze_count(), gc.get_threshold()[0])
"""


@pytest.mark.parametrize("env, want", [
    ({}, (1, 0.001, True, server_process.GC_THRESHOLD0)),
    ({"BERTCORE_SERVER_THREADS": "2", "BERTCORE_SWITCH_INTERVAL": "0.005", "BERTCORE_GC_FREEZE": "0"},
     (2, 0.005, False, 700)),
])
def test_the_server_process_is_tuned_for_a_class(env, want):
    """The server's own torch threads, switch interval and collector (tune_server_process), in a fresh process:
    the settings are process-wide. The second call changes nothing."""
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("BERTCORE_SERVER", "BERTCORE_SWITCH",
                                                                       "BERTCORE_GC"))}
    r = subprocess.run([sys.executable, "-c", _TUNE], env={**clean, **env}, capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    threads, interval, frozen, threshold0 = r.stdout.split()
    assert (int(threads), float(interval), int(frozen) > 100_000, int(threshold0)) == want
    assert r.stderr.count("server process tuned") == 1


def test_the_server_settings_are_checked(monkeypatch):
    monkeypatch.setenv("BERTCORE_SERVER_THREADS", "many")
    with pytest.raises(Exception, match="BERTCORE_SERVER_THREADS"):
        server_process.server_threads()
    monkeypatch.setenv("BERTCORE_SWITCH_INTERVAL", "0")
    assert server_process.switch_interval() == 0.0001  # clamped to its floor


def test_each_check_runs_once_per_training_across_the_process_boundary(data, tmp_path, monkeypatch):
    """A spec checked where it is built (the Train page's ``app_spec``) travels as JSON: the training route in the
    child checks neither the configs nor the budget again; a spec changed after its check is checked again."""
    from bertcore.errors import ConfigError
    from bertcore.training import trainer as trainer_mod

    corpus, tok, cfg = data
    calls = {"compatible": 0, "budget": 0}
    real_compatible, real_budget = service.check_compatible, service.check_budget

    def compatible(*a):
        calls["compatible"] += 1
        return real_compatible(*a)

    def budget(*a, **kw):
        calls["budget"] += 1
        return real_budget(*a, **kw)

    monkeypatch.setattr(service, "check_compatible", compatible)
    monkeypatch.setattr(trainer_mod, "check_compatible", compatible)
    monkeypatch.setattr(service, "check_budget", budget)
    spec = RunSpec(cfg, _tc(steps=3), corpus=corpus, tokenizer=tok, name="once")
    spec.check()  # where the page builds it
    assert calls == {"compatible": 1, "budget": 1}
    folder = tmp_path / "launch"
    folder.mkdir()
    child_spec = RunSpec.from_json(spec.to_json(folder, 0), folder)  # what the training process reads
    result = service.train(child_spec, tmp_path / "run")
    assert result.status == "finished" and result.trainer.step_count == 3
    assert calls == {"compatible": 1, "budget": 1}
    # a spec changed after its check (its max_seq_len past the position table) is checked, and refused, again
    changed = RunSpec.from_json(spec.to_json(folder, 1), folder)
    changed.train_config.max_seq_len = 128
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        service.train(changed, tmp_path / "run2")
    # a spec nobody checked (the CLI, a notebook) is checked by the route, once
    calls.update(compatible=0, budget=0)
    service.train(RunSpec(cfg, _tc(steps=2), corpus=corpus, tokenizer=tok), tmp_path / "run3")
    assert calls == {"compatible": 1, "budget": 1}


def test_the_child_steps_its_first_step_five_calls_from_its_start(data, tmp_path, monkeypatch):
    """docs/CONTRACT.md's way in the training process: ``child → run_jobs → train → run_steps → Trainer.step``;
    ``drive`` keeps the run directory as the context around the loop, off the way. The run still ends finished."""
    import inspect

    from bertcore.training import trainer as trainer_mod
    from bertcore.training.drive import StopSignal

    corpus, tok, cfg = data
    ways, real_step = [], trainer_mod.Trainer.step
    root = str(Path(service.__file__).resolve().parents[2])

    def step(self):
        if not ways:  # the project functions on the stack at the first step, outermost first
            ways.append([f.function for f in reversed(inspect.stack()[1:]) if f.filename.startswith(root)
                         and "/tests/" not in f.filename])
        return real_step(self)

    monkeypatch.setattr(trainer_mod.Trainer, "step", step)
    events = []
    worker.run_jobs([RunSpec(cfg, _tc(steps=3), corpus=corpus, tokenizer=tok, name="way")], tmp_path, events.append,
                    StopSignal())
    assert ways == [["run_jobs", "train", "run_steps"]]
    end = [e for e in events if e["ev"] == "job_end"]
    assert end and end[0]["status"] == "finished" and end[0]["steps"] == 3
    assert runs.read_run(end[0]["run_dir"]).status == "finished"
