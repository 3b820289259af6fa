"""``python -m bench.experiments.scale [--quick] [--json]``: pre-training throughput from shards (docs/BENCH.md).

* **data parallel**: tokens/s of 1 process vs 2 gloo processes (DistributedDataParallel) on 127.0.0.1, each
  with 1 torch thread and the same per-process batch (so 2 processes train on a global batch twice as large);
  the speedup is (2-process tokens/s) / (1-process tokens/s), target >= 1.7x.
* **bf16 vs fp32 on CPU**: tokens/s of one process under ``torch.autocast(cpu, bfloat16)`` vs fp32.

The corpus is ~1 MB of English prose found on this machine (licence texts, the Vim user manual: see
``PROSE_SOURCES``), prepared once into a temporary folder. Every figure is the median of repeated timed blocks
after warm-up steps; no timing is asserted anywhere. GPU runs are not measured here (see docs/BENCH.md).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported

PROSE_SOURCES = ("/usr/share/common-licenses/*", "/usr/share/vim/vim*/doc/usr_*.txt",
                 "/usr/share/vim/vim*/doc/intro.txt", "/usr/lib/python3*/LICENSE.txt")
MODEL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
             max_position_embeddings=128)
TRAIN = dict(max_seq_len=128, lr=1e-3, warmup_steps=10, eval_every=0, snapshot_every=0, eval_size=64)


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def make_corpus(path: str | Path, target_bytes: int = 1_000_000) -> Path:
    """Concatenate real English prose from this machine (blank lines separate documents) up to target_bytes."""
    out, n = bytearray(), 0
    for pattern in PROSE_SOURCES:
        for f in sorted(glob.glob(pattern)):
            try:
                data = Path(f).read_bytes()
                data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            out += data.replace(b"\r\n", b"\n") + b"\n\n"
            n += 1
            if len(out) >= target_bytes:
                break
    if n == 0 or len(out) < 10_000:
        raise SystemExit("no prose found on this machine; pass --corpus FILE")
    Path(path).write_bytes(bytes(out[:target_bytes]).rsplit(b"\n", 1)[0] + b"\n")
    return Path(path)


def train_worker(rank: int, world: int, data_dir: str, model_kw: dict, train_kw: dict, grad_accum: int = 1,
                 precision: str = "fp32", warmup: int = 0, blocks: int = 0, block_steps: int = 0,
                 independent: bool = False) -> dict:
    """One process of a (possibly distributed) shard training run: ``train_kw['steps']`` steps, or for timing
    ``warmup`` steps then ``blocks`` timed blocks of ``block_steps``. Returns losses and tokens/s (global).
    ``independent``: no process group; each spawned process trains its own model alone (tokens/s its own)."""
    import torch

    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.pretraining import MaskingRates
    from bertcore.data.shard_batches import ShardData
    from bertcore.data.shards import ShardReader
    from bertcore.training import distributed
    from bertcore.training.device import Runtime
    from bertcore.training.trainer import Trainer

    if independent:  # the ceiling: this process trains alone (its own seed), whatever the others do
        rank, world = 0, 1
        train_kw = {**train_kw, "seed": train_kw.get("seed", 0) + int(os.environ.get("RANK", "0"))}
    else:
        distributed.init("cpu", world)
    try:
        reader = ShardReader.open(data_dir)
        tok = reader.tokenizer()
        tc = TrainConfig(**train_kw)
        data = ShardData(reader, tok, tc.max_seq_len, MaskingRates.from_train_config(tc), tc.nsp_positive_prob,
                         tc.held_out_frac, tc.seed, tc.batch_size, grad_accum, rank, world)
        rt = Runtime(device="cpu", precision=precision, grad_accum=grad_accum, rank=rank, world_size=world)
        data = _Counting(data)
        trainer = Trainer(BertConfig(**{**model_kw, "vocab_size": tok.vocab_size}), tc, data=data, runtime=rt)
        if not blocks:
            trainer.run()
            h = trainer.history.frame()
            return {"mlm_loss": h.mlm_loss.tolist(), "nsp_loss": h.nsp_loss.tolist(), "mlm_acc": h.mlm_acc.tolist()}
        for _ in range(warmup):
            trainer.step()
        rates = []
        for _ in range(blocks):
            data.tokens = 0
            t0 = time.perf_counter()
            for _ in range(block_steps):
                trainer.step()
            dt = time.perf_counter() - t0
            total = distributed.all_reduce_sum(torch.tensor([float(data.tokens)]), rt)
            rates.append(float(total[0]) / dt)
        return {"tokens_per_s": statistics.median(rates), "blocks": rates, "global_batch": data.global_batch_size}
    finally:
        distributed.shutdown()


class _Counting:
    """A data source that counts the non-padding tokens of the batches it hands out (this process only)."""

    def __init__(self, data):
        self._data, self.tokens = data, 0

    def __getattr__(self, name):
        return getattr(self._data, name)

    def step_batches(self, step: int) -> list[dict]:
        batches = self._data.step_batches(step)
        self.tokens += sum(int(b["attention_mask"].sum()) for b in batches)
        return batches


def _run(nproc: int, data_dir: str, batch: int, precision: str, warmup: int, blocks: int, block_steps: int,
         independent: bool = False) -> dict:
    from bertcore.training import distributed

    kw = {**TRAIN, "batch_size": batch, "steps": warmup + blocks * block_steps + 1}
    res = distributed.spawn_local(train_worker, nproc, threads=1,
                                  args=(data_dir, MODEL, kw, 1, precision, warmup, blocks, block_steps, independent))
    if independent:  # together: the sum of what each process did alone at the same time
        return {"tokens_per_s": sum(r["tokens_per_s"] for r in res), "global_batch": res[0]["global_batch"],
                "per_process": [r["tokens_per_s"] for r in res]}
    return res[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments.scale", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer timed blocks (a smoke run)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--corpus", help="a text file to prepare instead of the prose found on this machine")
    p.add_argument("--batch", type=int, default=32, help="sequences per process per step (default 32)")
    args = p.parse_args(argv)
    from bertcore.data.shards import prepare

    blocks, block_steps, warmup = (2, 3, 2) if args.quick else (5, 8, 5)
    load0 = os.getloadavg()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(args.corpus) if args.corpus else make_corpus(Path(tmp) / "prose.txt")
        log(f"bench.experiments.scale: preparing {corpus} ({corpus.stat().st_size:,} bytes) ...")
        t0 = time.perf_counter()
        meta = prepare(corpus, Path(tmp) / "data", vocab_size=8000, quiet=True)
        prep_s = time.perf_counter() - t0
        data = str(Path(tmp) / "data")
        r = {"command": "python -m bench.experiments.scale" + (" --quick" if args.quick else ""), "model": MODEL,
             "train": {**TRAIN, "batch_size_per_process": args.batch}, "corpus_bytes": corpus.stat().st_size,
             "tokens": sum(s["tokens"] for s in meta["shards"]), "prepare_s": prep_s,
             "timing": f"median of {blocks} blocks x {block_steps} steps after {warmup} warm-up steps"}
        runs = {}
        for name, nproc, prec, alone in (("1 process fp32", 1, "fp32", False),
                                         ("2 processes fp32 (gloo)", 2, "fp32", False),
                                         ("2 independent processes fp32 (no communication)", 2, "fp32", True),
                                         ("1 process bf16 (CPU autocast)", 1, "bf16", False)):
            log(f"bench.experiments.scale: {name} ...")
            runs[name] = _run(nproc, data, args.batch, prec, warmup, blocks, block_steps, alone)
        one, two, ceiling, bf = (runs[k]["tokens_per_s"] for k in runs)
        r["runs"] = runs
        r["ddp_speedup"] = two / one
        r["independent_speedup"] = ceiling / one
        r["bf16_vs_fp32"] = bf / one
    r["loadavg"] = {"start": [round(x, 2) for x in load0], "end": [round(x, 2) for x in os.getloadavg()]}
    r["cpus"] = os.cpu_count()
    r["total_s"] = time.perf_counter() - t_start
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"{r['command']}: {r['corpus_bytes']:,} bytes -> {r['tokens']:,} tokens (prepare {prep_s:.1f} s); "
          f"model {MODEL}; {r['timing']}; load {r['loadavg']} on {r['cpus']} CPUs")
    print("| run | tokens/s | global batch |\n|---|---|---|")
    for k, v in runs.items():
        print(f"| {k} | {v['tokens_per_s']:,.0f} | {v['global_batch']} |")
    print(f"\n2 processes / 1 process: {r['ddp_speedup']:.2f}x (target >= 1.7x); 2 independent processes / 1: "
          f"{r['independent_speedup']:.2f}x (what two processes get here with no communication at all); "
          f"bf16 / fp32 on CPU: {r['bf16_vs_fp32']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
