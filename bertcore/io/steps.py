"""Replay: a run's weights at every held-out evaluation, so any view can show the model as it was at a step.

Layout inside a run directory::

    steps/step_000000.safetensors   the initial weights (step 0, written before the first update)
    steps/step_000050.safetensors   the weights after 50 optimizer steps, ...

Each file holds the model's unique tensors (tied weights once, as model.safetensors) exactly as they were (float32),
so a number recomputed from a step (the skills, a probe) is the one the run recorded at that step; a default model
is about 0.6 MB a step. Steps saved in float16 by older runs still load (cast back to float32). The config and
vocabulary are the run's own (config.json, vocab.txt), so a step file holds weights only.

At most ``max_saved_steps()`` files are kept (env ``BERTCORE_MAX_SAVED_STEPS``, default 64). When a new step
would pass the cap, every second step between the first and the last is deleted, so the kept steps stay
spread over the whole run (step 0 and the newest are always kept). Runs made before replay existed have no
``steps/`` folder: ``list_steps`` then offers the final checkpoint alone.
"""
from __future__ import annotations

import re
from pathlib import Path

from bertcore.errors import CheckpointError, InputError
from bertcore.io.checkpoint import (
    ModelBundle,
    atomic_save_safetensors,
    load_checkpoint,
    load_safetensors,
    nonfinite_problem,
    unique_state_dict,
)
from bertcore.message import Message
from bertcore import settings

STEPS_DIR = "steps"
_STEP_FILE = re.compile(r"^step_(\d{6,9})\.safetensors$")


def max_saved_steps() -> int:
    """How many step files a run keeps (env BERTCORE_MAX_SAVED_STEPS, default 64, at least 2)."""
    return settings.whole("BERTCORE_MAX_SAVED_STEPS")


def step_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / STEPS_DIR / f"step_{int(step):06d}.safetensors"


def list_steps(run_dir: str | Path) -> list[int]:
    """The saved steps of ``run_dir``, ascending (empty when the run has no ``steps/`` folder)."""
    d = Path(run_dir) / STEPS_DIR
    if not d.is_dir():
        return []
    return sorted(int(m.group(1)) for p in d.iterdir() if (m := _STEP_FILE.match(p.name)))


def save_step(model, run_dir: str | Path, step: int, cap: int | None = None) -> Path:
    """Write the model's weights after ``step`` optimizer steps (as they are, atomically), then thin to ``cap``."""
    path = step_path(run_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in unique_state_dict(model).items()}
    atomic_save_safetensors(tensors, path, metadata={"step": str(int(step)), "dtype": "float32"})
    thin(run_dir, max_saved_steps() if cap is None else int(cap))
    return path


def thin(run_dir: str | Path, cap: int) -> list[int]:
    """Delete every second step between the first and the last until at most ``cap`` remain; the kept steps."""
    steps = list_steps(run_dir)
    while len(steps) > max(2, cap):
        keep = [steps[0], *steps[2:-1:2], steps[-1]]
        for s in set(steps) - set(keep):
            step_path(run_dir, s).unlink(missing_ok=True)
        steps = sorted(set(keep))
    return steps


def truncate_after(run_dir: str | Path, step: int) -> None:
    """Remove saved steps after ``step`` (a resumed run continues from its checkpoint at ``step``)."""
    for s in list_steps(run_dir):
        if s > step:
            step_path(run_dir, s).unlink(missing_ok=True)


def load_step(run_dir: str | Path, step: int | None = None, bundle: ModelBundle | None = None) -> ModelBundle:
    """The run's model as it was after ``step`` (None: the final checkpoint), with the run's tokenizer.

    ``bundle``: the run's loaded checkpoint, reused for its config and vocabulary (saves a disk read). The
    weights are the step file's values (an older run's float16 cast to float32). InputError names the steps there
    are."""
    base = bundle if bundle is not None else load_checkpoint(run_dir)
    if step is None:
        return base
    path = step_path(run_dir, step)
    if not path.is_file():
        have = list_steps(run_dir)
        if have:
            raise InputError(Message("step {step} is not saved in {run}; it has {saved}", step=step,
                                     run=Path(run_dir).name, saved=", ".join(map(str, have))))
        raise InputError(Message("step {step} is not saved in {run}; it was trained before steps were saved, so only "
                                 "its final weights exist (leave the step out)", step=step, run=Path(run_dir).name))
    weights = load_safetensors(path, f"the weights of step {step}")
    problem = nonfinite_problem(weights, path.name)
    if problem:
        raise CheckpointError(problem)
    model = type(base.model)(base.model.config)
    expected = model.state_dict()
    missing = [k for k in weights if k not in expected]
    if missing:
        raise CheckpointError(Message("{name} holds weights this model does not have ({missing}); the step file is "
                                      "from another run", name=path.name, missing=str(missing[:3])))
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in weights.items()}, strict=False)
    for flag in ("has_mlm_head", "has_nsp_head"):
        setattr(model, flag, getattr(base.model, flag, True))
    model.sentence_task = getattr(base.model, "sentence_task", "nsp")
    model.eval()
    history = base.history
    if history is not None and len(history) and "step" in history:
        history = history[history["step"] <= step].reset_index(drop=True)
    return ModelBundle(model=model, tokenizer=base.tokenizer, history=history, name=f"{base.name} @ step {step}",
                       source=base.source, snapshots=[s for s in base.snapshots if s.step <= step],
                       probe_tokens=list(base.probe_tokens), notes=list(base.notes), train_config=base.train_config)

