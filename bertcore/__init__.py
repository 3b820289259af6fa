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
    "WordTokenizer": "tokenization", "WordPieceTokenizer": "tokenization", "load_tokenizer": "tokenization",
    "Corpus": "corpus", "builtin_corpus": "corpus", "tutorial_corpus": "corpus", "load_corpus_file": "corpus",
    "PretrainingData": "pretraining", "mask_tokens": "pretraining", "build_pair": "pretraining",
    "Trainer": "trainer",
    "fill_mask": "inference", "nsp_probability": "inference", "inspect_pair": "inference",
    "ModelBundle": "checkpoint", "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint",
    "export_hf": "hf_interop", "import_hf": "hf_interop",
}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'bertcore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"bertcore.{mod}"), name)
