"""Everything a ``Trainer`` needs to continue exactly where it stopped, in one safetensors file.

``resume.safetensors`` in a run directory holds, after step N:

* ``model.*``      the weights (tied tensors once, as in model.safetensors)
* ``optim.<i>.*``  AdamW's per-parameter state (``step``, ``exp_avg``, ``exp_avg_sq``; Loshchilov & Hutter 2019)
* ``rng.data``     the state of the data-order / masking generator (BERT §3.1 masks are drawn from it)
* ``rng.dropout``  the state of the dropout generator

and, as string metadata, the step, the optimizer's param groups and the LR schedule position (JSON).
One file written atomically means weights, optimizer moments and RNG states always belong to the same
step, even if the process is killed while the run directory is being rewritten. Nothing is pickled.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from bertcore.errors import CheckpointError
from bertcore.message import Message
from bertcore.io.checkpoint import atomic_save_safetensors, unique_state_dict

RESUME_FILE = "resume.safetensors"
FORMAT = "bertcore-resume-1"


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[k] = v
    return out


def save_trainer_state(trainer, path: str | Path) -> None:
    """Write the trainer's full state after ``trainer.step_count`` steps to ``path`` (atomically)."""
    tensors = {f"model.{k}": v for k, v in unique_state_dict(trainer.model).items()}
    opt = trainer.optimizer.state_dict()
    for pid, st in opt["state"].items():
        for name, value in st.items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"optim.{int(pid)}.{name}"] = t.detach().cpu().contiguous().clone()
    tensors["rng.data"] = trainer._gen.get_state()
    tensors["rng.dropout"] = trainer._dropout_gen.get_state()
    sched = _jsonable({k: v for k, v in trainer.scheduler.state_dict().items() if k != "lr_lambdas"})
    meta = {"format": FORMAT, "step": str(int(trainer.step_count)),
            "param_groups": json.dumps(opt["param_groups"]), "scheduler": json.dumps(sched)}
    atomic_save_safetensors(tensors, path, metadata=meta)


def read_resume_step(path: str | Path) -> int | None:
    """The step a resume file was written after, or None when it is missing or unreadable."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        return int(meta["step"]) if meta.get("format") == FORMAT else None
    except Exception:  # noqa: BLE001 - missing, truncated or foreign file: not resumable
        return None


def load_trainer_state(trainer, path: str | Path) -> int:
    """Restore weights, AdamW state, LR schedule and both RNG states into ``trainer``; returns the step.

    ``trainer`` must have been built with the same model config, train config, corpus and tokenizer."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    except Exception as e:  # noqa: BLE001 - SafetensorError, OSError
        raise CheckpointError(Message("{file} cannot be read ({err}); this run cannot be resumed, start a new one",
                                      file=path.name, err=str(e))) from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(Message("{file} is not a bertcore resume file; this run cannot be resumed",
                                      file=path.name))
    try:
        step = int(meta["step"])
        groups = json.loads(meta["param_groups"])
        sched = json.loads(meta["scheduler"])
    except (KeyError, ValueError) as e:
        raise CheckpointError(Message("{file} has damaged metadata ({err}); this run cannot be resumed",
                                      file=path.name, err=str(e))) from None
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    missing, unexpected = trainer.model.load_state_dict(weights, strict=False)
    if unexpected:
        raise CheckpointError(Message("{file} holds weights this model does not have (e.g. {names}); "
                                      "the run's config.json and its resume file disagree",
                                      file=path.name, names=unexpected[:2]))
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    for g in groups:
        if isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
    try:
        trainer.optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError) as e:
        raise CheckpointError(Message("{file}: the optimizer state does not fit this model ({err})",
                                      file=path.name, err=str(e))) from None
    trainer.scheduler.load_state_dict({**sched, "lr_lambdas": [None] * len(trainer.optimizer.param_groups)})
    trainer._gen.set_state(tensors["rng.data"])
    try:
        trainer._dropout_gen.set_state(tensors["rng.dropout"])
    except RuntimeError:  # saved by another kind of device (a CUDA generator's state is not a CPU one's)
        trainer._dropout_gen.manual_seed(int(trainer.config.seed) + step)  # a fresh stream, the same for every retry
    trainer.step_count = step
    return step
