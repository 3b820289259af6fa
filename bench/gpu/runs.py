"""Whole trainings of ``python -m bench.gpu``, through the route every front end uses (``service.train``):

* **loop vs step**: ``train --data`` on prepared shards (``bertcore prepare``, the CLI itself) against
  ``Trainer.step`` on fixed batches of the same shape. The loop's rate is read off its own ``step`` events,
  from a few steps in to the step before the last (so start-up, the final evaluation and the run directory's
  writes are left out); the step's rate is timed over steps on pinned batches taken from the same shards.
* **the default app run**: the Train page's Start with its defaults (600 steps, its ~20 evaluations, snapshots,
  live probe and skills), on the device and precision ``auto`` picks, wall time from the RunSpec to the saved run.
* **determinism**: two runs with the same arguments, twice: without ``deterministic`` and with it; identical
  histories (every loss, accuracy and evaluation) or not, and the cost of the deterministic kernels.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.gpu.steps import free, sync
from bench.training import padded_tokenizer

TIME_COLUMNS = ("tokens_per_s",)  # history columns that are timings, not training results


def prepare_shards(work: Path, corpus, vocab_size: int, sentences_per_doc: int = 24) -> Path:
    """A prepared folder (``bertcore prepare``, run as the CLI runs it) of the built-in sentences, grouped into
    documents of ``sentences_per_doc``; its vocab.txt is the corpus' words topped up with [unusedN] to
    ``vocab_size`` (BERT's 30522 for the table's shapes), so the model has the shape of the step table."""
    from bertcore.cli import main as cli_main

    work.mkdir(parents=True, exist_ok=True)
    sents = corpus.sentences()
    docs = [" ".join(sents[i:i + sentences_per_doc]) for i in range(0, len(sents), sentences_per_doc)]
    (work / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    (work / "vocab.txt").write_text("\n".join(padded_tokenizer(corpus, vocab_size).vocab) + "\n", encoding="utf-8")
    out = work / "data"
    with contextlib.redirect_stdout(sys.stderr):  # the CLI's lines go with the progress, not the tables
        rc = cli_main(["prepare", "--corpus", str(work / "corpus.txt"), "--out", str(out), "--vocab",
                       str(work / "vocab.txt"), "--quiet"])
    if rc != 0:
        raise RuntimeError(f"bertcore prepare exited with {rc} (its error is on stderr)")
    return out


def _configs(shape: tuple, steps: int, **train_kw):
    from bertcore.config import BertConfig, TrainConfig

    _, D, L, H, F, T, B = shape
    bert = BertConfig(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=F,
                      max_position_embeddings=max(512, T))
    return bert, TrainConfig(batch_size=B, max_seq_len=T, steps=steps, **train_kw)


def loop_vs_step(name: str, shape: tuple, data: Path, work: Path, device: str, precision: str, make_runtime,
                 steps: int, skip: int) -> dict:
    """``train --data``'s steps/s (``steps`` steps, the first ``skip`` and the last left out) over
    ``Trainer.step``'s on 8 fixed batches of the same folder and shape."""
    from bertcore.launch import service
    from bertcore.training.callbacks import Callbacks

    dev = torch.device(device)
    first, last = skip, steps - 1  # timed: from the end of step `first` to the end of step `last`
    marks: dict[int, float] = {}

    def on_step(ev):  # only these two steps wait for the device; the others go on as a run does
        if ev.trainer.step_count in (first, last):
            sync(dev)
            marks[ev.trainer.step_count] = time.perf_counter()

    bert, tc = _configs(shape, steps, eval_every=0, snapshot_every=0)
    spec = service.RunSpec(bert, tc, data=str(data), runtime=make_runtime(device, precision), name=f"loop {name}",
                           source=f"bench.gpu train --data {data}")
    t0 = time.perf_counter()
    result = service.train(spec, work / f"loop-{name}-{precision}", callbacks=Callbacks(step=on_step))
    wall = time.perf_counter() - t0
    if result.status != "finished":
        raise RuntimeError(f"train --data ended {result.status}: {result.reason}")
    del result
    free(dev)
    loop_sps = (last - first) / (marks[last] - marks[first])

    bert, tc = _configs(shape, 1_000_000, eval_every=0, snapshot_every=0)
    spec = service.RunSpec(bert, tc, data=str(data), runtime=make_runtime(device, precision), name="step")
    trainer, *_ = service.prepare(spec)
    pin = torch.device(device).type == "cuda"
    fixed = [[{k: (v.pin_memory() if pin else v) for k, v in b.items()} for b in trainer.data.step_batches(i)]
             for i in range(8)]
    trainer.data.step_batches = lambda step: fixed[step % len(fixed)]
    for _ in range(max(2, skip // 2)):
        trainer.step()
    n = last - first
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        trainer.step()
    sync(dev)
    step_sps = n / (time.perf_counter() - t0)
    if trainer.error:
        raise RuntimeError(f"Trainer.step stopped: {trainer.error}")
    tokens = sum(float(b["attention_mask"].sum()) for bs in fixed for b in bs) / len(fixed)
    vocab = trainer.tokenizer.vocab_size
    del trainer
    free(dev)
    return {"shape": name, "precision": precision, "vocab": vocab,
            "seq": shape[5], "batch": shape[6], "loop_steps": steps, "loop_timed_steps": last - first,
            "loop_steps_s": loop_sps, "step_steps_s": step_sps, "ratio": loop_sps / step_sps,
            "real_tokens_per_batch": tokens, "loop_tokens_s": loop_sps * tokens, "loop_run_wall_s": wall}


def default_app_run(work: Path, steps: int | None) -> dict:
    """The Train page's Start with its defaults (built-in corpus, word vocabulary, the tiny model, skills and
    live probe, ~20 evaluations) through ``service.train``, on what ``--device auto --precision auto`` picks."""
    from bertcore.config import BertConfig, TrainConfig, measure_cadence
    from bertcore.training import device as dev
    from bertcore.launch import service

    rt = dev.resolve_runtime("auto", "auto")
    n = steps or TrainConfig.steps
    tc = TrainConfig(steps=n, **measure_cadence(n))
    spec = service.RunSpec(BertConfig(), tc, corpus="builtin", tokenizer="word", runtime=rt,
                           name="bench.gpu default run", source="bench.gpu")
    t0 = time.perf_counter()
    result = service.train(spec, work / "app-default")
    wall = time.perf_counter() - t0
    tr = result.trainer
    ev = tr.history.last_eval() or {}
    return {"steps": tr.step_count, "status": result.status, "wall_s": wall, "train_seconds": tr.train_seconds,
            "asked_runtime": f"{rt.device}, {rt.precision}", "trained_on": f"{tr.device}, {tr.runtime.precision}",
            "evaluations": int(tr.history.frame()["eval_mlm_acc"].notna().sum()),
            "eval_mlm_acc": ev.get("eval_mlm_acc"), "eval_nsp_acc": ev.get("eval_nsp_acc"),
            "unigram_baseline": tr.unigram_baseline}


def _history(result):
    frame = result.trainer.history.frame()
    return frame.drop(columns=[c for c in TIME_COLUMNS if c in frame.columns])


def _differ(a, b) -> tuple[bool, float]:
    """(identical, the largest absolute difference of any value) of two history frames."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False, math.inf
    x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    diff = np.abs(x - y)[~same]
    return bool(same.all()), float(np.nan_to_num(diff, nan=np.inf).max()) if diff.size else 0.0


def determinism_pair(shape: tuple, data: Path, work: Path, device: str, precision: str, make_runtime, steps: int,
                     deterministic: bool) -> dict:
    """Two ``train --data`` runs with identical arguments (``deterministic`` or not): identical histories or not.
    ``python -m bench.gpu`` runs each pair in a process of its own, as the CLI trains: torch's deterministic mode
    and cuBLAS's workspace setting hold for a whole process and must be set before its first cuBLAS call."""
    from bertcore.launch import service

    runs = []
    for k in range(2):
        bert, tc = _configs(shape, steps, eval_every=max(1, steps // 2), snapshot_every=0, seed=0)
        extra = {"deterministic": True} if deterministic else {}
        spec = service.RunSpec(bert, tc, data=str(data), runtime=make_runtime(device, precision, **extra),
                               name=f"run {k}", source="bench.gpu determinism")
        result = service.train(spec, work / f"det-{int(deterministic)}-{k}")
        if result.status != "finished":
            raise RuntimeError(f"determinism run {k} ended {result.status}: {result.reason}")
        last = result.trainer.history.last_eval() or {}
        runs.append({"history": _history(result), "steps_s": steps / max(result.trainer.train_seconds, 1e-9),
                     "mlm_loss": result.trainer.history.last()["mlm_loss"], "eval_mlm_acc": last.get("eval_mlm_acc")})
        del result
        free(torch.device(device))
    identical, max_diff = _differ(runs[0]["history"], runs[1]["history"])
    return {"identical": identical, "max_abs_diff": max_diff, "final_mlm_loss": [r["mlm_loss"] for r in runs],
            "eval_mlm_acc": [r["eval_mlm_acc"] for r in runs], "steps_s": [r["steps_s"] for r in runs],
            "torch_deterministic": torch.are_deterministic_algorithms_enabled(),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}
