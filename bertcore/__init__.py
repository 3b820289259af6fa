"""bertcore: a from-scratch BERT (Devlin et al. 2019) that trains, predicts and explains itself.

Import what you need from the submodules, or use the lazy names below::

    from bertcore import BertConfig, TrainConfig, Trainer, builtin_corpus, fill_mask
"""
import os as _os

# Measured on 2 cores: with the UI busy on one core, OpenMP's active spin-wait made training 3.5x slower.
# It must be set before torch is imported to take effect.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

_LAZY = {
    "BertConfig": "config", "TrainConfig": "config", "PRESETS": "config", "estimate": "config",
    "BertcoreError": "errors", "ConfigError": "errors", "InputError": "errors",
    "CorpusError": "errors", "CheckpointError": "errors", "TokenizerError": "errors",
    "BertForPreTraining": "model", "PreTrainingOutput": "model", "sinusoidal_table": "model",
    "WordTokenizer": "data.tokenization", "WordPieceTokenizer": "data.tokenization", "load_tokenizer": "data.tokenization",
    "Corpus": "data.corpus", "builtin_corpus": "data.corpus", "tutorial_corpus": "data.corpus", "load_corpus_file": "data.corpus",
    "PretrainingData": "data.pretraining", "mask_tokens": "data.pretraining", "build_pair": "data.pretraining",
    "Trainer": "training.trainer",
    "fill_mask": "analysis.inference", "nsp_probability": "analysis.inference", "inspect_pair": "analysis.inference",
    "ModelBundle": "io.checkpoint", "save_checkpoint": "io.checkpoint", "load_checkpoint": "io.checkpoint",
    "export_hf": "io.hf_interop", "import_hf": "io.hf_interop",
}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'bertcore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"bertcore.{mod}"), name)
