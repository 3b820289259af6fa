"""Tiny, real model folders for the access tests (tests/test_folder_access_app.py, test_share_links.py, the browser
test): an untrained one-layer BERT (seed 0) saved as a checkpoint, optionally as a finished run of a workspace."""
from __future__ import annotations

from pathlib import Path

import torch

from bertcore.config import BertConfig
from bertcore.data.corpus import tutorial_corpus
from bertcore.data.tokenization import WordTokenizer
from bertcore.io.checkpoint import ModelBundle, save_checkpoint
from bertcore.model.bert import BertForPreTraining
from bertcore.training import runs


def model_folder(d: Path, name: str = "tiny") -> Path:
    """A bertcore checkpoint folder at ``d`` (config.json, model.safetensors, vocab.txt)."""
    tok = WordTokenizer.build(tutorial_corpus().texts())
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)
    save_checkpoint(ModelBundle(model=BertForPreTraining(cfg).eval(), tokenizer=tok, name=name), d)
    return d


def workspace_run(ws: str, name: str) -> Path:
    """A finished run named ``name`` in workspace ``ws`` (below BERTCORE_RUNS_DIR)."""
    d = runs.new_run_dir(runs.workspace_dir(ws), name)
    model_folder(d, name)
    runs.write_run_json(d, runs.run_meta(name, status="finished", steps_done=4, total_steps=4))
    return d
