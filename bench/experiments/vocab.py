"""``python -m bench.experiments.vocab``: any text at the built-in pace? Step time and time to 2x unigram, side by side.

For each text (``bench.experiments.texts``: English prose, the People's Daily, classical Chinese prose and poetry, Japanese,
and on request Russian and the Tang poems; ``--text FILE`` any other) the file is read as Data & tokens reads an
upload and given the defaults the Train page and ``bertcore train --corpus FILE`` give it (``bench.experiments.prose.
upload_defaults`` -> ``bertcore.data.corpus_defaults``). Its trainer and one on the built-in corpus (its own
defaults) live in one process, torch at 1 thread, and take turns: ``--block`` steps each, then a held-out
evaluation of each (not timed). Per trainer the bench records

* the median time of a training step over the blocks both ran (ratio text / built-in: the step-time bar 1.5x);
* the training seconds (the sum of its step times, evaluations excluded: their cadence is the bench's) until its
  held-out MLM accuracy first reaches 2x its unigram baseline (ratio: the time-to-skill bar 3x).

Both trainers stop once both have reached 2x, or when the text has trained ``--budget`` seconds.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported

DEFAULT_TEXTS = ("en", "zh", "zh-classical", "ja")


def text_trainer(path: Path, overrides: dict | None = None):
    """(trainer, defaults) for ``path`` with the upload defaults (``overrides``: TrainConfig fields to change, for
    exploring); evaluation, snapshots and the probe off."""
    from bench.experiments.prose import upload_defaults
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus_defaults import train_config_for
    from bertcore.training.trainer import Trainer

    corpus, tok, chosen = upload_defaults(path)
    tc = train_config_for(TrainConfig(), chosen).replace(eval_every=0, snapshot_every=0, **(overrides or {}))
    return Trainer(BertConfig(), tc, corpus, tokenizer=tok), chosen


def builtin_trainer():
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer
    from bertcore.training.trainer import Trainer

    b = builtin_corpus()
    tc = TrainConfig(eval_every=0, snapshot_every=0)
    return Trainer(BertConfig(), tc, b, tokenizer=WordTokenizer.build(b.texts()))


class Clock:
    """One trainer's timed steps, its evaluations and the training time at which it first reached ``goal`` x
    unigram."""

    def __init__(self, trainer, goal: float):
        self.tr, self.goal = trainer, goal
        self.seconds, self.cpu_seconds = 0.0, 0.0
        self.block_ms, self.block_cpu_ms, self.eval_ms, self.evals = [], [], [], []
        self.reached: tuple[float, int, float] | None = None

    def block(self, n: int) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        k = 0
        while k < n and not self.tr.done:
            self.tr.step()
            k += 1
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        self.seconds += dt
        self.cpu_seconds += dc
        if k:
            self.block_ms.append(dt / k * 1000)
            self.block_cpu_ms.append(dc / k * 1000)
        t0 = time.perf_counter()
        acc = self.tr.evaluate()["eval_mlm_acc"]
        self.eval_ms.append((time.perf_counter() - t0) * 1000)
        x = acc / self.tr.unigram_baseline
        self.evals.append((self.tr.step_count, round(self.seconds, 2), round(acc, 4), round(x, 3)))
        if self.reached is None and x >= self.goal:
            self.reached = (self.seconds, self.tr.step_count, self.cpu_seconds)


def race(path: Path, block: int, budget: float, goal: float, overrides: dict | None = None,
         logits_path: bool = False) -> dict:
    t0 = time.perf_counter()
    text, chosen = text_trainer(path, overrides)
    if logits_path:
        text._loss_only = {}  # the (N, V) logits, then the loss: the step before the fused loss
    setup = time.perf_counter() - t0
    base = builtin_trainer()
    clocks = {"text": Clock(text, goal), "builtin": Clock(base, goal)}
    both = 0  # blocks in which both trained: the step-time medians use these
    while clocks["text"].seconds < budget and not (clocks["text"].reached and clocks["builtin"].reached):
        if text.done and clocks["text"].reached is None:
            break
        ran = []
        for c in clocks.values():
            if not c.tr.done:
                c.block(block)
                ran.append(c)
        if len(ran) == 2:
            both += 1
        if not ran:
            break
    med = {k: statistics.median(c.block_ms[:both]) if both else math.nan for k, c in clocks.items()}
    cpu = {k: statistics.median(c.block_cpu_ms[:both]) if both else math.nan for k, c in clocks.items()}
    out = {"file": str(path), "logits_path": logits_path, "overrides": overrides or {}, "pairs": len(text.corpus),
           "vocab": text.tokenizer.vocab_size,
           "max_seq_len": text.config.max_seq_len, "batch_size": text.config.batch_size,
           "defaults": chosen.to_dict(), "setup_s": round(setup, 1), "step_ms": med,
           "step_ratio": med["text"] / med["builtin"], "step_cpu_ms": cpu, "cpu_ratio": cpu["text"] / cpu["builtin"],
           "blocks": both}
    for k, c in clocks.items():
        out[k] = {"unigram": c.tr.unigram_baseline, "reached_s": c.reached[0] if c.reached else None,
                  "reached_step": c.reached[1] if c.reached else None,
                  "reached_cpu_s": c.reached[2] if c.reached else None, "eval_ms": statistics.median(c.eval_ms),
                  "evals": c.evals}
    r_t, r_b = out["text"]["reached_s"], out["builtin"]["reached_s"]
    out["skill_ratio"] = r_t / r_b if r_t and r_b else None
    c_t, c_b = out["text"]["reached_cpu_s"], out["builtin"]["reached_cpu_s"]
    out["skill_cpu_ratio"] = c_t / c_b if c_t and c_b else None
    return out


def _fmt(seconds, step) -> str:
    return f"{seconds:.1f} s (step {step})" if seconds else "not reached"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.vocab", description=__doc__.split("\n")[0])
    ap.add_argument("--texts", default=",".join(DEFAULT_TEXTS), help="comma-separated, from bench.experiments.texts.LANGS")
    ap.add_argument("--text", action="append", default=[], help="a file of your own (repeatable)")
    ap.add_argument("--cache", default="/tmp/bertx-prose-cache", help="where the downloaded texts are kept")
    ap.add_argument("--block", type=int, default=10, help="steps per turn; each turn ends in an evaluation")
    ap.add_argument("--budget", type=float, default=240.0, help="most training seconds per text")
    ap.add_argument("--goal", type=float, default=2.0, help="held-out MLM accuracy / unigram baseline")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--logits-path", action="store_true", help="the text's step through the (N, V) logits, as before "
                    "the fused MLM loss (with --set for the old defaults: the bench before the change)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change a TrainConfig field of the text's run (exploration only)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from bench.experiments.texts import text_file

    paths = [text_file(lang, Path(args.cache))[0] for lang in args.texts.split(",") if lang]
    paths += [Path(p) for p in args.text]
    from bertcore.config import split_overrides

    overrides = split_overrides(dict(kv.split("=", 1) for kv in args.set))[1] if args.set else None
    rows = []
    for path in paths:
        load0 = os.getloadavg()[0]
        r = race(path, args.block, args.budget, args.goal, overrides, args.logits_path)
        r["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        rows.append(r)
        t, b = r["text"], r["builtin"]
        print(f"{path.name}: {r['pairs']} pairs, vocab {r['vocab']}, max_seq_len {r['max_seq_len']}, batch "
              f"{r['batch_size']}{', logits path' if r['logits_path'] else ''}; "
              f"step {r['step_ms']['text']:.1f} / {r['step_ms']['builtin']:.1f} ms = {r['step_ratio']:.2f}x "
              f"(CPU time {r['cpu_ratio']:.2f}x); "
              f"to {args.goal:g}x unigram {_fmt(t['reached_s'], t['reached_step'])} / "
              f"{_fmt(b['reached_s'], b['reached_step'])} = "
              f"{'%.2fx' % r['skill_ratio'] if r['skill_ratio'] else '-'} (CPU time "
              f"{'%.2fx' % r['skill_cpu_ratio'] if r['skill_cpu_ratio'] else '-'}); load {r['load']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
