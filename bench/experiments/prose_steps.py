"""``python -m bench.experiments.prose_steps``: step time of an upload's default run against the built-in corpus's, interleaved.

``bench.experiments.prose`` times each corpus in its own 60 s window, so a neighbour's load in one window moves the ratio.
Here both trainers live in one process (torch at 1 thread, evaluation off) and take turns: ``--blocks`` rounds
of ``--steps`` steps each, after 10 warm-up steps; the medians of the per-step times are compared
(docs/BENCH.md). The upload is read and given its defaults exactly as in ``bench.experiments.prose`` (``upload_defaults``);
``--lang`` picks the same texts, ``--text FILE`` any other.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.prose_steps", description=__doc__.split("\n")[0])
    ap.add_argument("--lang", choices=("en", "zh", "zh-poetry"), default="zh-poetry")
    ap.add_argument("--text", help="your own prose file instead")
    ap.add_argument("--cache", default="/tmp/bertx-prose-cache", help="where the downloaded texts are kept")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from bench.experiments.prose import prose_file, upload_defaults
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer
    from bertcore.training.trainer import Trainer

    path, _ = prose_file(args.text, args.lang, Path("/tmp/bertx-prose.txt"), Path(args.cache))
    corpus, tok, chosen = upload_defaults(path)
    upload = Trainer(BertConfig(), TrainConfig(max_seq_len=chosen.max_seq_len, eval_every=0), corpus, tokenizer=tok)
    b = builtin_corpus()
    builtin = Trainer(BertConfig(), TrainConfig(eval_every=0), b, tokenizer=WordTokenizer.build(b.texts()))
    trainers = {"upload": upload, "builtin": builtin}
    for tr in trainers.values():
        for _ in range(10):
            tr.step()
    ms: dict[str, list[float]] = {k: [] for k in trainers}
    for _ in range(args.blocks):
        for name, tr in trainers.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                tr.step()
            ms[name].append((time.perf_counter() - t0) / args.steps * 1000)
    med = {k: statistics.median(v) for k, v in ms.items()}
    r = {"file": str(path), "vocab": tok.vocab_size, "max_seq_len": chosen.max_seq_len, "median_ms": med,
         "ratio": med["upload"] / med["builtin"], "blocks_ms": {k: [round(x, 1) for x in v] for k, v in ms.items()}}
    if args.json:
        print(json.dumps(r))
    else:
        print(f"{path.name}: vocabulary {tok.vocab_size}, max_seq_len {chosen.max_seq_len}; median step "
              f"{med['upload']:.1f} ms against {med['builtin']:.1f} ms on the built-in corpus = {r['ratio']:.2f}x")
        print(f"blocks (ms/step): {r['blocks_ms']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
