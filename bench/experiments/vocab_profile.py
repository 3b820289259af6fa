"""``python -m bench.experiments.vocab_profile``: where a training step goes, the built-in corpus against a large-vocabulary text.

The built-in corpus's trainer and the text's (``bench.experiments.vocab``: the upload defaults) in ``--variants`` run in one
process at 1 thread, taking turns of ``--steps`` steps under ``torch.profiler``, ``--rounds`` times. A variant is
``PATH[@LEN]``: PATH ``fused`` (the decoder fused with the loss, what a step does now) or ``logits`` (the (N, V)
logits, then the loss: the step before), at max_seq_len LEN (default: the upload default). The default variants,
``logits@28,fused@28,fused``, are the text's step before this change, with the fused loss alone, and after it.

Every operator's self time goes to one part of the step:

* data: drawing the batch (pairs, NSP negatives, masking; the trainer's ``_next_batches``, marked here);
* vocabulary (MLM decoder, softmax, loss): every operator with an input of the vocabulary's size V (the decoder
  matmuls and their backward, the softmax and the loss, the V x D gradient of the tied embedding and its sum);
* embedding lookup: the embedding operators and their backward;
* optimizer: AdamW, the gradient norm and clipping, zeroing the gradients;
* encoder and the rest: everything else (attention, feed-forward, LayerNorms, the NSP head, autograd's own work).

A part's ms per step is its share of the operators' time times the step's CPU time (``time.thread_time``), so that
a neighbour's load, which stretches the profiler's wall-clock spans, cancels; medians over the rounds.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported

PARTS = ("data", "vocabulary (MLM decoder, softmax, loss)", "embedding lookup", "optimizer", "encoder and the rest")


def _part(name: str, shapes, vocab: int, in_data: bool) -> str:
    if in_data:
        return PARTS[0]
    low = name.lower()
    if "adam" in low or low.startswith("aten::_foreach") or "zero_" in low or "clip" in low:
        return PARTS[3]
    if "embedding" in low:
        return PARTS[2]
    if any(isinstance(s, (list, tuple)) and vocab in s for s in shapes or ()):
        return PARTS[1]
    return PARTS[4]


def profile_steps(trainer, steps: int) -> tuple[dict, float]:
    """ms per step per part over ``steps`` profiled steps (shares of the operators' time x CPU time), and the CPU
    ms per step."""
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    inner = trainer._next_batches

    def marked():
        with record_function("bench::data"):
            return inner()

    trainer._next_batches = marked
    try:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            t0 = time.thread_time()
            for _ in range(steps):
                trainer.step()
            cpu = (time.thread_time() - t0) / steps * 1000
    finally:
        del trainer._next_batches
    vocab = trainer.tokenizer.vocab_size
    ms: dict[str, float] = defaultdict(float)
    data_spans = [(e.time_range.start, e.time_range.end) for e in prof.events() if e.name == "bench::data"]
    for e in prof.events():
        if e.name == "bench::data":
            continue
        in_data = any(a <= e.time_range.start and e.time_range.end <= b for a, b in data_spans)
        ms[_part(e.name, e.input_shapes, vocab, in_data)] += e.self_cpu_time_total / 1000 / steps
    # the data pipeline is mostly Python, which no operator holds: its part is the whole span
    ms[PARTS[0]] = sum(b - a for a, b in data_spans) / 1000 / steps
    total = sum(ms.values())
    return {k: v / total * cpu for k, v in ms.items()}, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.vocab_profile", description=__doc__.split("\n")[0])
    ap.add_argument("--lang", default="zh-classical", help="a text of bench.experiments.texts")
    ap.add_argument("--text", help="a file of your own instead")
    ap.add_argument("--cache", default="/tmp/bertx-prose-cache")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--variants", default="logits@28,fused@28,fused",
                    help="the text's runs: PATH[@LEN], PATH fused|logits")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from bench.experiments.texts import text_file
    from bench.experiments.vocab import builtin_trainer, text_trainer

    path = Path(args.text) if args.text else text_file(args.lang, Path(args.cache))[0]
    trainers = {"built-in": builtin_trainer()}
    for v in args.variants.split(","):
        kind, _, length = v.partition("@")
        tr, _ = text_trainer(path, {"max_seq_len": int(length)} if length else None)
        if kind == "logits":
            tr._loss_only = {}  # the MLM logits, then the loss (the step before the fused loss)
        trainers[f"{path.stem}, {kind}, T={tr.config.max_seq_len}"] = tr
    for tr in trainers.values():
        for _ in range(5):
            tr.step()
    acc = {k: defaultdict(list) for k in trainers}
    for _ in range(args.rounds):
        for k, tr in trainers.items():
            parts, cpu = profile_steps(tr, args.steps)
            for p in PARTS:
                acc[k][p].append(parts.get(p, 0.0))
            acc[k]["cpu"].append(cpu)
    res = {k: {p: sorted(v)[len(v) // 2] for p, v in d.items()} for k, d in acc.items()}
    res = {k: {**d, "vocab": trainers[k].tokenizer.vocab_size} for k, d in res.items()}
    if args.json:
        print(json.dumps(res))
        return 0
    names = list(trainers)
    print(f"| part (ms per step, median of {args.rounds} turns of {args.steps}) | " + " | ".join(
        f"{n} (V={res[n]['vocab']:,})" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for p in PARTS:
        print(f"| {p} | " + " | ".join(f"{res[n][p]:.1f}" for n in names) + " |")
    print("| CPU time per step (profiled) | " + " | ".join(f"{res[n]['cpu']:.1f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
