"""Data-parallel pre-training over several processes (DistributedDataParallel; Li et al. 2020, "PyTorch
Distributed"): gloo on CPU, NCCL on CUDA.

Every process holds a full copy of the model and builds its own slice of each global batch
(bertcore.data.shard_batches); DDP averages the gradients in the backward pass, so every copy takes the
same AdamW step. The losses are normalised by the *global* number of masked tokens and of examples (one small
all-reduce per step, in the Trainer), so N processes compute exactly the step of one process on the whole
global batch: the MLM loss is a mean over every masked token of the global batch, not a mean of per-process
means. Rank 0 alone evaluates, logs and writes the run directory.

Start it with ``torchrun --nproc_per_node=N [--nnodes=M ...] -m bertcore train --data DATA ...`` (torchrun
sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT), or ``python -m bertcore train --data DATA
--nproc-per-node N`` for one machine, which also turns a failed process into one ``error:`` line.
``spawn_local`` starts N processes on 127.0.0.1 for tests and benchmarks.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from torch.nn.parallel import DistributedDataParallel as DDP

from bertcore.errors import ConfigError

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def env_world() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when not under a launcher."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise ConfigError("RANK / WORLD_SIZE / LOCAL_RANK must be whole numbers; start the processes with "
                          "torchrun") from None
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is not in a world of WORLD_SIZE={world}; start the processes with torchrun")
    return rank, world, local


def init(device: str, world_size: int) -> None:
    """Join the process group torchrun describes (NCCL for CUDA devices, gloo for CPU)."""
    if world_size <= 1 or (dist.is_available() and dist.is_initialized()):
        return
    if not dist.is_available():
        raise ConfigError("this torch build has no torch.distributed; install a standard torch wheel")
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        raise ConfigError(f"WORLD_SIZE={world_size} but {', '.join(missing)} is not set; start the processes with "
                          "torchrun (it sets them)")
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend=backend)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(t: torch.Tensor, runtime) -> torch.Tensor:
    """Sum ``t`` over all processes in place (a no-op in one process)."""
    if runtime.distributed:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=runtime.group)
    return t


def wrap(model: torch.nn.Module, runtime) -> torch.nn.Module:
    """The module the training step calls: DDP around ``model`` when there are several processes."""
    if not runtime.distributed:
        return model
    dev = runtime.torch_device
    return DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None, process_group=runtime.group)


# ------------------------------------------------------------------ local launch (tests, benchmarks)
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, fn, nproc: int, port: int, out_dir: str, threads: int, args: tuple) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    result = fn(rank, nproc, *args)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")


def spawn_local(fn, nproc: int, args: tuple = (), threads: int = 1) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``nproc`` fresh processes on 127.0.0.1 (a free port); return the
    JSON-able results in rank order. A process that raises stops the others and re-raises here."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(fn, nproc, free_port(), out, threads, args), nprocs=nproc, join=True)
        return [json.loads(Path(out, f"rank{r}.json").read_text(encoding="utf-8")) for r in range(nproc)]


def launch(nproc: int, argv: list[str]) -> int:
    """``python -m bertcore ARGV`` in ``nproc`` processes on this machine (torchrun's launcher, in process).

    Returns 0, or 2 after one ``error:`` line when a process failed (its own ``error:`` line is above)."""
    cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"bertcore-{os.getpid()}",
                       rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                       monitor_interval=0.2)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # our own error line says it
    try:
        elastic_launch(cfg, sys.executable)("-m", "bertcore", *argv)
    except ChildFailedError as e:
        ranks = ", ".join(f"rank {r} (exit {f.exitcode})" for r, f in sorted(e.failures.items()))
        print(f"error: {len(e.failures)} of {nproc} training processes failed: {ranks}; see the message above "
              "(the other processes were stopped)", file=sys.stderr)
        return 2
    return 0
