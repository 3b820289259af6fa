"""`prepare` shards (boundaries, idempotence, resumption, bad input), the shard batches (IsNext from the same
document, NotNext from another, per-example determinism, held-out documents), `train --data` with --resume."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.shard_batches import _HELD_OUT, _TRAIN, ShardData
from bertcore.data.shards import META, ShardReader, prepare
from bertcore.data.tokenization import SPECIAL_TOKENS
from bertcore.errors import CorpusError, InputError
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal

ROOT = Path(__file__).resolve().parents[1]
N_DOCS = 40


def doc_text(k: int) -> str:
    """Document k: 2..6 sentences "dK sJ wA wB ." (the marker words name the document and the sentence)."""
    return " ".join(f"d{k} s{j} w{(k + j) % 7} w{(k * j) % 5} ." for j in range(2 + k % 5))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    text = "\n\n".join(doc_text(k) for k in range(N_DOCS)) + "\n"
    (tmp / "corpus.txt").write_text(text, encoding="utf-8")
    words = [f"d{k}" for k in range(N_DOCS)] + [f"s{j}" for j in range(7)] + [f"w{i}" for i in range(7)] + ["."]
    (tmp / "vocab.txt").write_text("\n".join(SPECIAL_TOKENS + words) + "\n", encoding="utf-8")
    return tmp


@pytest.fixture(scope="module")
def data(corpus):
    prepare(corpus / "corpus.txt", corpus / "data", vocab=str(corpus / "vocab.txt"), shard_tokens=200, quiet=True)
    return corpus / "data"


def decode(tok, ids):
    return tok.convert_ids_to_tokens(ids)


def test_shards_keep_every_sentence_and_document(data):
    r = ShardReader.open(data)
    tok = r.tokenizer()
    assert len(r.meta["shards"]) > 1 and r.n_documents == N_DOCS  # several shards, cut at document ends
    assert r.n_sentences == sum(2 + k % 5 for k in range(N_DOCS))
    for d in range(N_DOCS):
        sents = [decode(tok, r.sentence(s)) for s in range(int(r.doc_start[d]), int(r.doc_start[d + 1]))]
        assert sents == [[f"d{d}", f"s{j}", f"w{(d + j) % 7}", f"w{(d * j) % 5}", "."] for j in range(2 + d % 5)]
    assert r.tokens[0].dtype == np.uint16


def test_prepare_is_idempotent_and_resumes_after_an_interruption(corpus, data, tmp_path):
    before = {p.name: p.stat().st_mtime_ns for p in data.iterdir()}
    prepare(corpus / "corpus.txt", data, vocab=str(corpus / "vocab.txt"), shard_tokens=200, quiet=True)
    assert {p.name: p.stat().st_mtime_ns for p in data.iterdir()} == before  # finished: nothing rewritten
    # interrupted after its first shard: data.json lists one shard and is not complete
    part = tmp_path / "part"
    part.mkdir()
    meta = json.loads((data / META).read_text())
    for p in data.iterdir():
        if p.name in (META, "vocab.txt", "tokenizer.json") or p.name.startswith("shard_00000."):
            (part / p.name).write_bytes(p.read_bytes())
    (part / META).write_text(json.dumps({**meta, "shards": meta["shards"][:1], "complete": False}))
    with pytest.raises(InputError, match="only partly prepared"):
        ShardReader.open(part)
    prepare(corpus / "corpus.txt", part, vocab=str(corpus / "vocab.txt"), shard_tokens=200, quiet=True)
    again = json.loads((part / META).read_text())
    assert again["shards"] == meta["shards"] and again["complete"]
    for s in meta["shards"]:
        for kind in ("tokens", "sents", "docs"):
            assert np.array_equal(np.load(part / f"{s['name']}.{kind}.npy"), np.load(data / f"{s['name']}.{kind}.npy"))
    with pytest.raises(InputError, match="other files or settings"):
        prepare(corpus / "corpus.txt", part, vocab_size=100, quiet=True)


def test_bad_corpora(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n   \n")
    with pytest.raises(Exception, match="empty text|no text"):
        prepare(tmp_path / "empty.txt", tmp_path / "o1", quiet=True)
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_text("one doc. two sentences.\n\nanother doc. here.\n")
    (folder / "b.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    with pytest.raises(CorpusError, match=r"b\.bin looks binary"):
        prepare(folder, tmp_path / "o2", vocab_size=50, quiet=True)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait.".encode("latin-1"))
    with pytest.raises(CorpusError, match="not valid UTF-8"):
        prepare(tmp_path / "latin1.txt", tmp_path / "o3", vocab_size=50, quiet=True)
    (tmp_path / "one.txt").write_text("a single document. with two sentences.\n")
    with pytest.raises(CorpusError, match="at least 2 documents"):
        prepare(tmp_path / "one.txt", tmp_path / "o4", vocab_size=50, quiet=True)
    with pytest.raises(InputError, match="no such file"):
        prepare(tmp_path / "one.txt", tmp_path / "o5", vocab=str(tmp_path / "missing.txt"), quiet=True)


def test_isnext_from_the_same_document_notnext_from_another(data):
    r = ShardReader.open(data)
    tok = r.tokenizer()
    sd = ShardData(r, tok, max_seq_len=40, batch_size=8, seed=1)
    n_next = 0
    for i in range(200):
        ids, types, label, _, _ = sd.example(_TRAIN, 0, i)
        toks = decode(tok, ids)
        a = [t for t, s in zip(toks, types) if s == 0 and t.startswith(("d", "s"))]
        b = [t for t, s in zip(toks, types) if s == 1 and t.startswith(("d", "s"))]
        a_doc, b_doc = {t for t in a if t[0] == "d"}, {t for t in b if t[0] == "d"}
        assert len(a_doc) == 1 and len(b_doc) == 1
        if label == 0:
            n_next += 1
            assert a_doc == b_doc and int(b[1][1:]) == int(a[-1][1:]) + 1  # B starts right after A
        else:
            assert a_doc != b_doc
    assert 70 < n_next < 130  # nsp_positive_prob = 0.5


def test_examples_depend_only_on_seed_step_and_index(data):
    r = ShardReader.open(data)
    tok = r.tokenizer()
    sd = ShardData(r, tok, max_seq_len=40, batch_size=4, seed=2)
    big = sd.batch(_TRAIN, 7, range(0, 6))
    alone = sd.batch(_TRAIN, 7, [4])
    w = int(alone["attention_mask"].sum())
    for k in ("input_ids", "mlm_labels", "token_type_ids"):
        assert big[k][4, :w].tolist() == alone[k][0, :w].tolist()
    assert (big["mlm_labels"] != -100).any() and big["input_ids"].tolist() != sd.batch(_TRAIN, 8, range(6))["input_ids"].tolist()
    def rows(batches):
        return [b["input_ids"][j, :int(b["attention_mask"][j].sum())].tolist() for b in batches
                for j in range(len(b["nsp_labels"]))]

    ranks = [ShardData(r, tok, 40, batch_size=2, seed=2, grad_accum=2, rank=k, world_size=2).step_batches(7)
             for k in range(2)]
    assert rows(ranks[0] + ranks[1]) == rows([sd.batch(_TRAIN, 7, range(8))])  # 2 ranks x 2 micro x 2 = 8
    held = {int(d) for d in sd.splits[_HELD_OUT].docs}
    assert held and not held & {int(d) for d in sd.splits[_TRAIN].docs}


def tiny(**kw):
    return BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64, **kw)


def test_resume_continues_exactly_and_refuses_a_mismatch(data, tmp_path, capfd, monkeypatch):
    tc = TrainConfig(steps=12, batch_size=8, max_seq_len=40, eval_every=4, eval_size=16, snapshot_every=0, lr=3e-3,
                     warmup_steps=2, seed=4)
    full = service.train(service.RunSpec(tiny(), tc, data=str(data), name="full"), tmp_path / "full")
    stop = StopSignal()
    listen = Callbacks(step=lambda ev: stop.request("test") if ev.trainer.step_count == 5 else None)
    part = service.train(service.RunSpec(tiny(), tc, data=str(data)), tmp_path / "part", stop=stop, callbacks=listen)
    assert part.status == "stopped" and part.trainer.step_count == 5
    done = service.resume(tmp_path / "part")
    assert done.status == "finished"
    assert np.allclose(done.trainer.history.frame().mlm_loss, full.trainer.history.frame().mlm_loss, atol=1e-5)
    # the finished run opens like any checkpoint
    out = subprocess.run([sys.executable, "-m", "bertcore", "fill-mask", str(tmp_path / "full"), "d3 s1 [MASK] ."],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.returncode == 0 and "[MASK] at position 3" in out.stdout, out.stderr
    from streamlit.testing.v1 import AppTest  # ... and in the app, through the sidebar's folder box

    monkeypatch.setenv("BERTCORE_OPEN_ROOTS", str(tmp_path))  # the folder box is offered below these roots only
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    next(t for t in at.sidebar.text_input if t.key == "sb_hf_path").input(str(tmp_path / "full"))
    next(b for b in at.sidebar.button if b.key == "sb_hf_import").click()
    at.run()
    assert not at.exception and "**Active model:** full" in [m.value for m in at.sidebar.markdown]
    # a mismatched --resume: another data folder
    other = tmp_path / "other"
    (other).mkdir()
    (other / "c.txt").write_text(doc_text(1) + "\n\n" + doc_text(2) + "\n")
    prepare(other / "c.txt", other / "data", vocab_size=60, quiet=True)
    capfd.readouterr()
    assert main(["train", "--resume", str(tmp_path / "part"), "--data", str(other / "data")]) == 2
    assert "was trained on --data" in capfd.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "part"), "--set", "hidden_size=64"]) == 2
    assert "saved model and training settings" in capfd.readouterr().err


def test_cli_bad_input_and_a_failed_rank(tmp_path, capfd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "bertcore", "train", "--data", str(tmp_path / "none"), "--out",
                        str(tmp_path / "run"), "--nproc-per-node", "2", "--device", "cpu", "--quiet"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr + p.stdout, p.stderr
    assert "error: rank 1 of 2:" in p.stderr and "run `python -m bertcore prepare" in p.stderr
    assert p.stderr.rstrip().splitlines()[-1].startswith("error: 2 of 2 training processes failed")
    assert main(["prepare", "--corpus", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "d")]) == 2
    assert "no such file or folder" in capfd.readouterr().err
