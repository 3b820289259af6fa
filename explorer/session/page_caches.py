"""The pages' Streamlit caches (``st.cache_resource`` / ``st.cache_data``), shared by every session of the server.

They are defined here, in a module imported once, and not in app.py or a page script. Those files are run again at
every run of a page, so a cache decorator in them runs again too. Streamlit keys each cached function by its
source: it reads the file and tokenizes the function at every decoration, for every page run of every student
(docs/BENCH-HISTORY.md, "What a page run costs the server"). tests/test_architecture.py keeps the pages and
app.py free of them.
"""
from __future__ import annotations

import base64
import io

import numpy as np
import streamlit as st
from PIL import Image

from bertcore.analysis.sae_runs import features_of, open_sae
from bertcore.data.corpus import Corpus
from bertcore.data.pretraining import MaskingRates, PretrainingData, build_pair, masking_stats
from bertcore.data.tasks import get_task
from bertcore.config import TrainConfig


@st.cache_resource(show_spinner=False)
def page_icon() -> str:
    """app.py: a 32x32 favicon drawn in memory, as a data: URL made once per server. It is served by this server
    and nothing is fetched from the internet (a ":material/..." page_icon would make the browser fetch a Google
    font). The PNG is not encoded again at every run (a PIL image would be, by each st.set_page_config)."""
    img = np.zeros((32, 32, 3), dtype=np.uint8)
    img[:] = (255, 255, 255)
    colors = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88)]
    for i, c in enumerate(colors):  # four stacked "layers"
        img[3 + i * 7: 8 + i * 7, 4:28] = c
    png = io.BytesIO()
    Image.fromarray(img).save(png, format="PNG")
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode("ascii")


@st.cache_resource(show_spinner=False, max_entries=16)
def corpus_result(key: str, _fn):
    """Data & tokens: ``_fn()`` for a built-in or tutorial corpus, by ``key`` (read-only, for every session)."""
    return _fn()


@st.cache_data(show_spinner=False, max_entries=32)
def masking_convergence(key: str, _corpus, _tokenizer, max_len: int, rates: tuple, seed: int, pairs: int,
                        draws: tuple) -> list[dict]:
    """Masking & NSP: ``masking_stats`` after each number of ``draws`` of the corpus's first ``pairs`` pairs
    (BERT §3.1: the shares converge to the configured rates)."""
    sub = Corpus(_corpus.name, list(_corpus.pairs[:pairs]), _corpus.description)
    data = PretrainingData(sub, _tokenizer, max_len, MaskingRates(*rates), TrainConfig().nsp_positive_prob, 0.0, seed)
    return [dict(masking_stats(data, n, seed + n)) for n in draws]


@st.cache_data(show_spinner=False, max_entries=32)
def maskable_lengths(ckey: str, _corpus, _tokenizer, max_len: int, n_pairs: int) -> list[int]:
    """Masking & NSP: the maskable tokens (no [CLS]/[SEP]) of the first pairs as training builds them
    ([CLS] A [SEP] B [SEP], truncated to max_len)."""
    out = []
    for a, b in _corpus.pairs[:n_pairs]:
        ids, _ = build_pair(_tokenizer, _tokenizer.encode(a), _tokenizer.encode(b), max_len)
        out.append(sum(i not in _tokenizer.special_ids for i in ids))
    return out


@st.cache_resource(show_spinner="Building the task from the built-in grammar…")
def finetune_task(name: str):
    """Fine-tune: a built-in task, built once per server."""
    return get_task(name)


@st.cache_resource(max_entries=16, show_spinner=False)
def opened_sae(sae_dir: str, mtime: float, _bundle):
    """Features: (sae, cfg, training, bundle at its step, feature table) of an SAE folder, once per folder
    version."""
    sae, cfg, training, b = open_sae(sae_dir, _bundle)
    return sae, cfg, training, b, features_of(sae_dir, b)


@st.cache_data(max_entries=64, show_spinner=False)
def sae_families(sae_dir: str, mtime: float) -> dict:
    """Features: the best number / topic / [MASK] features of an SAE (its features.json), once per file version."""
    return features_of(sae_dir).get("families") or {}
