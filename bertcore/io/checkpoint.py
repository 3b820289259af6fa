"""Checkpoint directories: a trained model you can reload, share and inspect, without ever unpickling.

Layout of a checkpoint directory::

    config.json           BertConfig fields + "tokenizer_kind", "bertcore_version", "heads"
    model.safetensors     weights (safetensors: loading cannot execute code); shared tensors stored once
    vocab.txt             word-level vocabulary; WordPiece adds tokenizer.json
    history.csv           training history (Trainer.history), if any
    train_config.json     TrainConfig used for training, if known
    bundle.json           name, source, notes, probe tokens
    snapshots.safetensors attention-over-training snapshots ("step_<k>" -> [L,H,T,T]), if any

Only JSON and safetensors are ever read. ``torch.load`` / pickle are never used, so an untrusted directory
(e.g. an uploaded zip) cannot run code; a directory holding only ``pytorch_model.bin`` is refused.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save

from bertcore import __version__
from bertcore.config import BertConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.tokenization import WordTokenizer, load_tokenizer
from bertcore.errors import BertcoreError, CheckpointError
from bertcore.message import Message, reason
from bertcore.model.bert import init_model

PICKLE_NAMES = ("pytorch_model.bin", "model.pt", "model.pth", "model.bin", "checkpoint.pt", "model.ckpt")
_EXTRA_CONFIG_KEYS = ("tokenizer_kind", "bertcore_version", "heads")


@dataclass
class AttentionSnapshot:
    """Attention probabilities of every layer and head on the probe pair after ``step`` optimizer steps."""

    step: int
    attentions: np.ndarray  # float32 [L, H, T, T]


@dataclass
class ModelBundle:
    """A model with everything needed to use and explain it."""

    model: Any
    tokenizer: Any
    history: Any = None  # pandas DataFrame | None
    name: str = ""
    source: str = ""
    snapshots: list = field(default_factory=list)  # AttentionSnapshot
    probe_tokens: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    train_config: dict | None = None


def unique_state_dict(model) -> dict[str, torch.Tensor]:
    """state_dict with tensors that share storage (tied weights) kept once, under their first name."""
    out, seen = {}, set()
    for k, v in model.state_dict().items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
        if v.numel() and key in seen:
            continue
        seen.add(key)
        out[k] = v.detach().cpu().contiguous().clone()
    return out


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same folder, fsync, then ``os.replace``.

    A crash or kill mid-write leaves the previous file (or none) in place, never a half-written one."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; a checkpoint is an ordinary, shareable file
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_save_safetensors(tensors: dict[str, torch.Tensor], path: str | Path, metadata: dict | None = None) -> None:
    """``safetensors.torch.save`` written through ``atomic_write``."""
    atomic_write(path, save(tensors, metadata=metadata))


def save_checkpoint(bundle: ModelBundle, directory: str | Path) -> Path:
    """Write ``bundle`` to ``directory`` (created if needed); see the module docstring for the layout.

    Every file is replaced atomically, so a checkpoint rewritten while a run trains (or killed mid-save)
    stays loadable: each file is either its previous or its new version. Files from an earlier save that
    this bundle does not have (e.g. history.csv) are removed after the new files are in place."""
    d = Path(directory).expanduser()
    if d.exists() and not d.is_dir():
        raise CheckpointError(Message("{path} exists and is not a directory; choose another output folder", path=d))
    d.mkdir(parents=True, exist_ok=True)
    model, tok = bundle.model, bundle.tokenizer
    written = {"config.json", "model.safetensors", "bundle.json"}
    with tempfile.TemporaryDirectory(dir=d, prefix=".tok-") as tmp:  # the tokenizer writes plain files
        tok.save(tmp)
        for f in sorted(Path(tmp).iterdir()):
            os.replace(f, d / f.name)
            written.add(f.name)
    cfg = model.config.to_dict()
    cfg.update(tokenizer_kind=getattr(tok, "kind", "word"), bertcore_version=__version__,
               heads={"mlm": bool(getattr(model, "has_mlm_head", True)), "nsp": bool(getattr(model, "has_nsp_head", True)),
                      "sentence_task": str(getattr(model, "sentence_task", "nsp"))})
    atomic_write(d / "config.json", json.dumps(cfg, indent=2) + "\n")
    atomic_save_safetensors(unique_state_dict(model), d / "model.safetensors", metadata={"format": "pt"})
    if bundle.history is not None and len(bundle.history):
        atomic_write(d / "history.csv", bundle.history.to_csv(index=False))
        written.add("history.csv")
    tc = bundle.train_config
    if tc is not None:
        tc = tc.to_dict() if hasattr(tc, "to_dict") else dict(tc)
        atomic_write(d / "train_config.json", json.dumps(tc, indent=2) + "\n")
        written.add("train_config.json")
    if bundle.snapshots:
        snaps = {f"step_{i}_{int(s.step)}": torch.from_numpy(s.attentions).contiguous()
                 for i, s in enumerate(bundle.snapshots)}
        atomic_save_safetensors(snaps, d / "snapshots.safetensors")
        written.add("snapshots.safetensors")
    meta = {"name": bundle.name, "source": bundle.source, "notes": list(bundle.notes or []),
            "probe_tokens": list(bundle.probe_tokens or []), "snapshot_steps": [int(s.step) for s in bundle.snapshots]}
    atomic_write(d / "bundle.json", json.dumps(meta, indent=2) + "\n")
    for stale in ("history.csv", "train_config.json", "snapshots.safetensors", "tokenizer.json"):
        if stale not in written and (d / stale).is_file():  # left over from an earlier save into the same folder
            (d / stale).unlink()
    return d


def read_json_object(path: Path, what: str = "") -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        if what:
            raise CheckpointError(Message("cannot read {what} ({file}): {err}; it must be a UTF-8 JSON object",
                                          what=what, file=path.name, err=str(e))) from None
        raise CheckpointError(Message("cannot read ({file}): {err}; it must be a UTF-8 JSON object",
                                      file=path.name, err=str(e))) from None
    if not isinstance(obj, dict):
        raise CheckpointError(Message("{file} must hold a JSON object, got {type}", file=path.name,
                                      type=type(obj).__name__))
    return obj


def load_safetensors(path: Path, what: str) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as e:  # noqa: BLE001 - SafetensorError, OSError, header errors: all mean "damaged file"
        raise CheckpointError(Message("{what} ({file}) is not a valid safetensors file ({err}); "
                                      "save the checkpoint again", what=what, file=path.name, err=str(e))) from None


def nonfinite_problem(weights: dict[str, torch.Tensor], file: str = "model.safetensors") -> Message | None:
    """Why ``weights`` cannot be used when some hold NaN or ±inf, else None.

    A bertcore training never saves such weights (it stops before a non-finite step is applied), so they come
    from a damaged or edited file; a model made of them would only ever predict NaN. One float32 sum per tensor
    decides (a NaN or inf in it makes the sum non-finite; a finite sum means every value is finite); only a
    non-finite sum, which huge finite values could also give, is confirmed value by value. The sum is a
    single read of the tensor, cheaper than an elementwise isfinite (docs/BENCH-HISTORY.md, "Refusing NaN/inf
    weights")."""
    bad, nan, inf = [], False, False
    for name, v in weights.items():
        if not v.is_floating_point() or bool(torch.isfinite(v.sum(dtype=torch.float32))):
            continue
        if not bool(torch.isfinite(v).all()):
            bad.append(name)
            nan = nan or bool(torch.isnan(v).any())
            inf = inf or bool(torch.isinf(v).any())
    if not bad:
        return None
    what = Message("NaN and infinite values") if nan and inf else Message("NaN values") if nan \
        else Message("infinite values")
    return Message("{file} holds {what} in {n} of its {total} weights (e.g. {names}): the model is damaged and would "
                   "only predict NaN; delete it and train again, or use another checkpoint", file=file, what=what,
                   n=len(bad), total=len(weights), names=", ".join(bad[:2]))


_CHECKED_LOCK = threading.Lock()
_CHECKED: dict[tuple, str | None] = {}  # (path, size, mtime, inode) -> weights_problem's answer


def weights_problem(directory: str | Path) -> str | None:
    """Why a folder's model.safetensors cannot be used (unreadable, or NaN/inf weights), else None; never
    raises. Read once per file version (cached by size, mtime and inode), so a run list can ask every time."""
    path = Path(directory) / "model.safetensors"
    try:
        st = path.stat()
    except OSError:
        return None  # no weights: the caller says "missing"
    if not stat.S_ISREG(st.st_mode):
        return None  # a device or a pipe is no weights file either (is_file() is False: "missing")
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    with _CHECKED_LOCK:
        if key in _CHECKED:
            return _CHECKED[key]
    try:
        problem = nonfinite_problem(load_safetensors(path, Message("the weights")))
    except CheckpointError as e:
        problem = reason(e)
    except Exception as e:  # noqa: BLE001 - e.g. a symlink to a device: never raise from a listing
        problem = str(e)
    with _CHECKED_LOCK:
        if len(_CHECKED) > 512:
            _CHECKED.clear()
        _CHECKED[key] = problem
    return problem


def _shared_aliases(model) -> dict[str, str]:
    """name -> first name for state_dict entries that share storage with an earlier entry (tied weights)."""
    first: dict[tuple, str] = {}
    alias: dict[str, str] = {}
    for k, v in model.state_dict().items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
        if v.numel() and key in first:
            alias[k] = first[key]
        else:
            first[key] = k
    return alias


def load_checkpoint(directory: str | Path) -> ModelBundle:
    """Load a directory written by ``save_checkpoint``. Raises CheckpointError naming the problem and the fix."""
    d = Path(directory).expanduser()
    if not d.exists():
        raise CheckpointError(Message("checkpoint directory {path} does not exist; train one with "
                                      "`python -m bertcore train --out {path}` or check the path", path=d))
    if not d.is_dir():
        raise CheckpointError(Message("{path} is not a directory; a checkpoint is a folder with config.json and "
                                      "model.safetensors", path=d))
    pickles = [n for n in PICKLE_NAMES if (d / n).exists()] + sorted(p.name for p in d.glob("*.pkl"))
    if not (d / "model.safetensors").is_file() and pickles:
        raise CheckpointError(Message("{path} holds only pickle weights ({files}), which are never loaded because "
                                      "unpickling can run code; use a checkpoint with model.safetensors (transformers: "
                                      "save_pretrained(dir) then `python -m bertcore import-hf`)",
                                      path=d, files=", ".join(pickles)))
    if not (d / "config.json").is_file():
        raise CheckpointError(Message("{path} has no config.json; a checkpoint needs config.json, model.safetensors "
                                      "and vocab.txt", path=d))
    if not (d / "model.safetensors").is_file():
        raise CheckpointError(Message("{path} has no model.safetensors; the weights are missing, save the checkpoint "
                                      "again", path=d))
    if not ((d / "vocab.txt").is_file() or (d / "tokenizer.json").is_file()):
        raise CheckpointError(Message("{path} has no vocab.txt or tokenizer.json; the vocabulary is needed to read "
                                      "text", path=d))

    raw = read_json_object(d / "config.json", Message("the model config"))
    extra = {k: raw.pop(k) for k in _EXTRA_CONFIG_KEYS if k in raw}
    if "bertcore_version" not in extra and ("model_type" in raw or "architectures" in raw):
        raise CheckpointError(Message("{path} is a transformers model directory, not a bertcore checkpoint; convert "
                                      "it with `python -m bertcore import-hf {path} OUT_DIR`", path=d))
    try:
        config = BertConfig.from_dict(raw)
    except (BertcoreError, TypeError) as e:
        raise CheckpointError(Message("config.json is invalid: {err}",
                                      err=reason(e))) from None


    try:
        tokenizer = load_tokenizer(d, kind=extra.get("tokenizer_kind"))
    except BertcoreError as e:
        raise CheckpointError(Message("cannot load the vocabulary: {err}",
                                      err=reason(e))) from None
    if tokenizer.vocab_size != config.vocab_size:
        raise CheckpointError(Message("the vocabulary has {n} tokens but config.json says vocab_size={vocab_size}; "
                                      "they must come from the same checkpoint",
                                      n=tokenizer.vocab_size, vocab_size=config.vocab_size))

    weights = load_safetensors(d / "model.safetensors", Message("the weights"))
    model = init_model(config, 0)
    expected = model.state_dict()
    aliases = _shared_aliases(model)
    for k, v in weights.items():
        if k in expected and tuple(expected[k].shape) != tuple(v.shape):
            raise CheckpointError(Message("weight {name} has shape {shape} in model.safetensors but config.json "
                                          "implies {expected}; the config and the weights disagree (re-save the "
                                          "checkpoint or fix config.json)",
                                          name=k, shape=list(v.shape), expected=list(expected[k].shape)))
    unexpected = sorted(set(weights) - set(expected))
    if unexpected:
        raise CheckpointError(Message("model.safetensors has {n} weight(s) this config does not use, e.g. {names}; "
                                      "the config's variant switches probably differ from the training run",
                                      n=len(unexpected), names=unexpected[:3]))
    missing = sorted(k for k in expected if k not in weights and not (k in aliases and aliases[k] in weights))
    if missing:
        raise CheckpointError(Message("model.safetensors lacks {n} weight(s), e.g. {names}; the file is "
                                      "incomplete or from a different configuration",
                                      n=len(missing), names=missing[:3]))
    for k, v in weights.items():
        if not v.is_floating_point() and expected[k].is_floating_point():
            raise CheckpointError(Message("weight {name} has dtype {dtype}; weights must be floating point",
                                          name=k, dtype=v.dtype))
    problem = nonfinite_problem(weights)
    if problem:
        raise CheckpointError(problem)
    model.load_state_dict(weights, strict=False)
    heads = extra.get("heads") if isinstance(extra.get("heads"), dict) else {}
    model.has_mlm_head = bool(heads.get("mlm", True))
    model.has_nsp_head = bool(heads.get("nsp", True))
    model.sentence_task = str(heads.get("sentence_task", "nsp"))  # what the sentence head learned: nsp | sop | none
    model.eval()

    history = None
    if (d / "history.csv").is_file():
        try:
            history = pd.read_csv(d / "history.csv")
        except Exception as e:  # noqa: BLE001 - any parse error of a user file
            raise CheckpointError(Message("history.csv cannot be read ({err}); delete it or save the checkpoint again",
                                          err=str(e))) from None
    train_config = read_json_object(d / "train_config.json", Message("the training config")) \
        if (d / "train_config.json").is_file() else None
    meta = read_json_object(d / "bundle.json", Message("the bundle metadata")) if (d / "bundle.json").is_file() else {}
    snapshots = []
    if (d / "snapshots.safetensors").is_file():
        snaps = load_safetensors(d / "snapshots.safetensors", Message("the attention snapshots"))
        order = sorted(snaps, key=lambda k: int(k.split("_")[1]) if k.count("_") == 2 and k.split("_")[1].isdigit() else 0)
        for k in order:
            try:
                step = int(k.rsplit("_", 1)[1])
            except ValueError:
                continue
            snapshots.append(AttentionSnapshot(step, snaps[k].float().numpy()))
    return ModelBundle(model=model, tokenizer=tokenizer, history=history, name=str(meta.get("name") or d.name),
                       source=str(meta.get("source") or f"checkpoint:{d}"), snapshots=snapshots,
                       probe_tokens=[str(t) for t in meta.get("probe_tokens", [])],
                       notes=[str(n) for n in meta.get("notes", [])], train_config=train_config)


@functools.lru_cache(maxsize=1)
def builtin_tokenizer():
    """The word-level tokenizer of ``builtin_corpus(seed=0)`` (built once per process; treat as read-only)."""
    return WordTokenizer.build(builtin_corpus(seed=0).texts())


def untrained_bundle(seed: int = 0, **config_overrides) -> ModelBundle:
    """A fresh, untrained model (init from ``seed``) with the word tokenizer of ``builtin_corpus(seed=0)``."""
    tok = builtin_tokenizer()
    config = BertConfig(**{**config_overrides, "vocab_size": tok.vocab_size})
    model = init_model(config, seed).eval()
    return ModelBundle(model=model, tokenizer=tok, history=None, name="untrained",
                       source=f"random init, seed {seed}", notes=["untrained: predictions are random"])
