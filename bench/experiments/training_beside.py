"""``python -m bench.experiments.training_beside [--sessions 100] [--seconds 120] [--trainings 2] [--nice 10]``: trainings in
their own processes beside a loaded server (what a training outside the server's interpreter
would get).

First one training alone (``--solo-seconds``), then ``scripts/loadtest.py --trainings 0`` with ``--trainings``
trainings running beside it, each its own process at ``--nice`` with one torch thread: ``Trainer.step`` in a loop
on ``BertConfig()`` / ``TrainConfig()`` and the built-in grammar, steps/s per 10 s block. Prints the load test's
table, each training's blocks while the load ran, and their mean against the solo mean.

Numbers go to docs/BENCH.md ("The interpreter lock and a training thread's priority at 100 sessions"); nothing here
is asserted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bertcore  # noqa: F401 - sets OMP_WAIT_POLICY before torch is imported

REPO = Path(__file__).resolve().parents[2]
BLOCK = 10.0


def train_blocks(seconds: float, nice: int) -> None:
    """The child: train for ``seconds``, print one "end rate" line per block (end = the block's end, time.time())."""
    import torch

    from bertcore.config import BertConfig, TrainConfig
    from bertcore.data.corpus import builtin_corpus
    from bertcore.training.trainer import Trainer

    os.nice(nice)
    torch.set_num_threads(1)
    tr = Trainer(BertConfig(), TrainConfig(steps=1_000_000, num_threads=1), builtin_corpus())
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < BLOCK:
            tr.step()
            n += 1
        print(f"{time.time():.3f} {n / (time.perf_counter() - t0):.3f}", flush=True)


def _child(seconds: float, nice: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "bench.experiments.training_beside", "--child", str(seconds), "--nice", str(nice)]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)


def _rates(proc: subprocess.Popen, until: float = float("inf")) -> list[float]:
    """The child's block rates of blocks that ended by ``until`` (time.time())."""
    out, _ = proc.communicate()
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return [float(r) for t, r in rows if float(t) <= until]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--trainings", type=int, default=2)
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--solo-seconds", type=float, default=30.0)
    p.add_argument("--child", type=float, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child is not None:
        train_blocks(a.child, a.nice)
        return 0
    solo = _rates(_child(a.solo_seconds, a.nice))
    # the load test starts its server (a few seconds), then runs --seconds: the children train a little past it,
    # and only blocks that ended before the load did are counted
    kids = [_child(a.seconds + 40, a.nice) for _ in range(a.trainings)]
    subprocess.run([sys.executable, "scripts/loadtest.py", "--sessions", str(a.sessions), "--seconds",
                    str(a.seconds), "--trainings", "0"], cwd=REPO, check=False)
    load_end = time.time()
    solo_mean = statistics.mean(solo)
    print(f"solo: {' '.join(f'{r:.2f}' for r in solo)} steps/s, mean {solo_mean:.2f}")
    for i, k in enumerate(kids):
        rates = _rates(k, load_end)
        mean = statistics.mean(rates) if rates else float("nan")
        print(f"training {i + 1} beside the load: {' '.join(f'{r:.2f}' for r in rates)} steps/s, mean {mean:.2f} "
              f"= {mean / solo_mean:.0%} of solo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
