"""Sparse autoencoders on disk, in SAELens's layout, so a researcher can load one elsewhere.

One folder per SAE, inside its run directory (``RUN/saes/<name>/``)::

    cfg.json                  SAELens's config: architecture ("standard" | "topk"), d_in, d_sae, dtype, device,
                              apply_b_dec_to_input, normalize_activations, reshape_activations, k (top-k) and
                              metadata {sae_lens_version, hook_name, model_name, ...}
    sae_weights.safetensors   W_enc (d_in, d_sae), b_enc (d_sae,), W_dec (d_sae, d_in), b_dec (d_in,), float32
    training.json             how this one was made and its quality (bertcore's own, SAELens ignores it)
    features.json             the feature table: labels, contexts, histograms, output words (bertcore's own)

The layout is SAELens 6.54.12's ``SAE.save_model`` / ``SAE.load_from_disk`` (sae_lens/saes/sae.py,
sae_lens/loading/pretrained_sae_loaders.py: ``sae_lens_disk_loader``; constants SAE_CFG_FILENAME = "cfg.json",
SAE_WEIGHTS_FILENAME = "sae_weights.safetensors"): ``metadata.sae_lens_version`` >= 6 means the 6.x keys are read
as they are (``k`` at the top for "topk"); the pre-6 spellings ``activation_fn_kwargs: {"k": ...}`` and a top-level
``hook_name`` are written too, for older readers, and read back here. Forward as SAELens's StandardSAE / TopKSAE:
``f = act((x − b_dec) W_enc + b_enc)`` (apply_b_dec_to_input), ``x̂ = f W_dec + b_dec``; top-k keeps the k largest
pre-activations, then ReLU.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from bertcore.model.sae import ARCHITECTURES, SparseAutoencoder
from bertcore.errors import CheckpointError
from bertcore.io.checkpoint import atomic_save_safetensors, atomic_write, load_safetensors
from bertcore.message import Message

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
TRAINING_FILE = "training.json"
FEATURES_FILE = "features.json"
SAES_DIR = "saes"
SAE_LENS_FORMAT = "6.54.12"  # the SAELens version whose layout this matches (metadata.sae_lens_version)
WEIGHT_NAMES = ("W_enc", "b_enc", "W_dec", "b_dec")


def sae_cfg(sae: SparseAutoencoder, hook: str, model_name: str, layer: int, context_size: int) -> dict:
    """SAELens's cfg.json for ``sae`` reading the tap ``hook``."""
    cfg = {"architecture": sae.architecture, "d_in": sae.d_in, "d_sae": sae.d_sae, "dtype": "float32",
           "device": "cpu", "apply_b_dec_to_input": True, "normalize_activations": "none",
           "reshape_activations": "none",
           "metadata": {"sae_lens_version": SAE_LENS_FORMAT, "sae_lens_training_version": None,
                        "model_name": model_name, "hook_name": hook, "hook_layer": int(layer), "hook_head_index": None,
                        "context_size": int(context_size), "prepend_bos": True, "dataset_path": None,
                        "model_class_name": "bertcore.BertForPreTraining", "trained_with": "bertcore"},
           "hook_name": hook, "activation_fn": "topk" if sae.architecture == "topk" else "relu"}
    if sae.architecture == "topk":
        cfg.update(k=sae.k, rescale_acts_by_decoder_norm=False, activation_fn_kwargs={"k": sae.k})
    return cfg


def save_sae(sae: SparseAutoencoder, directory: str | Path, cfg: dict, training: dict | None = None) -> Path:
    """Write ``sae`` to ``directory`` (created) in SAELens's layout; every file atomically."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {n: getattr(sae, n).detach().float().contiguous().clone() for n in WEIGHT_NAMES}
    atomic_save_safetensors(tensors, d / WEIGHTS_FILE)
    atomic_write(d / CFG_FILE, json.dumps(cfg, indent=2))
    if training is not None:
        atomic_write(d / TRAINING_FILE, json.dumps(training, indent=2))
    return d


def _bad(d: Path, why: Message) -> CheckpointError:
    return CheckpointError(Message("{dir} is not a usable SAE folder: {why}; train it again (`python -m bertcore sae "
                                   "RUN --layer L`, or Train on the Features page)", dir=str(d), why=why))


def read_cfg(directory: str | Path) -> dict:
    d = Path(directory)
    if not d.is_dir():
        raise CheckpointError(Message("{dir} is not a folder; give an SAE folder (it holds cfg.json and "
                                      "sae_weights.safetensors)", dir=str(d)))
    try:
        cfg = json.loads((d / CFG_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _bad(d, Message("it has no {file}", file=CFG_FILE)) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise _bad(d, Message("{file} is not valid JSON ({err})", file=CFG_FILE, err=str(e)[:120])) from None
    if not isinstance(cfg, dict):
        raise _bad(d, Message("{file} is not a JSON object", file=CFG_FILE))
    arch = cfg.get("architecture", "standard")
    if arch not in ARCHITECTURES:
        raise _bad(d, Message("its architecture {arch} is not one this explorer reads (standard, topk)", arch=repr(arch)))
    for key in ("d_in", "d_sae"):
        if not isinstance(cfg.get(key), int) or isinstance(cfg.get(key), bool) or cfg[key] < 1:
            raise _bad(d, Message("{file} has no whole-number {key}", file=CFG_FILE, key=key))
    if arch == "topk" and _k(cfg) is None:
        raise _bad(d, Message("a topk SAE needs k in {file}", file=CFG_FILE))
    if cfg.get("normalize_activations", "none") != "none" or not cfg.get("apply_b_dec_to_input", True):
        raise _bad(d, Message("only SAEs with normalize_activations 'none' and apply_b_dec_to_input true are read here"))
    return cfg


def _k(cfg: dict) -> int | None:
    k = cfg.get("k", (cfg.get("activation_fn_kwargs") or {}).get("k"))
    return int(k) if isinstance(k, (int, float)) and not isinstance(k, bool) and k >= 1 else None


def hook_of(cfg: dict) -> str | None:
    """The hook name a cfg.json names (6.x: in metadata; before: at the top)."""
    meta = cfg.get("metadata") or {}
    return meta.get("hook_name") or cfg.get("hook_name")


def load_sae(directory: str | Path) -> tuple[SparseAutoencoder, dict]:
    """(the SAE, its cfg.json) from a folder in SAELens's layout; CheckpointError says what is wrong."""
    d = Path(directory)
    cfg = read_cfg(d)
    if not (d / WEIGHTS_FILE).is_file():
        raise _bad(d, Message("it has no {file}", file=WEIGHTS_FILE))
    w = load_safetensors(d / WEIGHTS_FILE, "the SAE's weights")
    d_in, d_sae = cfg["d_in"], cfg["d_sae"]
    shapes = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    for name, shape in shapes.items():
        if name not in w:
            raise _bad(d, Message("{file} has no {name}", file=WEIGHTS_FILE, name=name))
        if tuple(w[name].shape) != shape:
            raise _bad(d, Message("{name} has shape {got}, cfg.json says {want}", name=name,
                                  got=str(tuple(w[name].shape)), want=str(shape)))
        if not torch.isfinite(w[name]).all():
            raise _bad(d, Message("{name} holds NaN or infinite values", name=name))
    arch = cfg.get("architecture", "standard")
    k = _k(cfg) or 1
    if arch == "topk" and k > d_sae:
        raise _bad(d, Message("k={k} is larger than d_sae={n}", k=k, n=d_sae))
    sae = SparseAutoencoder(d_in, d_sae, arch, k)
    with torch.no_grad():
        for name in WEIGHT_NAMES:
            getattr(sae, name).copy_(w[name].float())
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    return sae, cfg


def read_json(path: Path) -> dict | None:
    """A JSON file of an SAE folder, or None when it is missing or unreadable (it is then recomputed)."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        return d if isinstance(d, dict) else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, ensure_ascii=False))


def list_saes(run_dir: str | Path) -> list[Path]:
    """The SAE folders of a run (those with a cfg.json), by name."""
    d = Path(run_dir) / SAES_DIR
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_dir() and (p / CFG_FILE).is_file())
