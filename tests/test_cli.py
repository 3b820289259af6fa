"""CLI contract (issue 2 point 10): every command works; bad input -> `error: ...` on stderr, exit 2, no traceback."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertcore.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--set", "hidden_size=32", "--set", "num_attention_heads=2", "--set", "intermediate_size=64",
        "--set", "batch_size=8", "--set", "eval_every=10", "--set", "eval_size=32", "--set", "max_seq_len=32",
        "--set", "snapshot_every=10"]


def run(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "bertcore", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def assert_bad(p):
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr + p.stdout, p.stderr


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    from bertcore.data.corpus import builtin_corpus

    f = tmp_path_factory.mktemp("corpus") / "pairs.tsv"
    f.write_text("".join(f"{a}\t{b}\n" for a, b in builtin_corpus(seed=0, n_pairs=300).pairs), encoding="utf-8")
    return f


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, corpus_file):
    out = tmp_path_factory.mktemp("ck") / "model"
    # --tokenizer word: a file would get WordPiece by default (bertcore.data.corpus_defaults, as on the Train page)
    p = run("train", "--out", out, "--corpus", corpus_file, "--steps", 20, "--seed", 1, "--tokenizer", "word", *TINY)
    assert p.returncode == 0, p.stderr
    assert "held-out" in p.stdout and "unigram baseline" in p.stdout and "Traceback" not in p.stderr
    return out


def test_train_writes_checkpoint(ckpt):
    for name in ("config.json", "model.safetensors", "vocab.txt", "history.csv"):
        assert (ckpt / name).is_file(), name
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["hidden_size"] == 32 and cfg["num_attention_heads"] == 2
    lines = (ckpt / "history.csv").read_text().splitlines()
    assert lines[0].startswith("step,mlm_loss,nsp_loss") and len(lines) == 21
    assert json.loads((ckpt / "train_config.json").read_text())["seed"] == 1


def test_fill_mask_nsp_inspect_json(ckpt):
    p = run("fill-mask", ckpt, "the cat [MASK] the [MASK] .", "--top-k", 3, "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert set(r) == {"tokens", "masks"} and r["tokens"][0] == "[CLS]"
    assert [m["position"] for m in r["masks"]] == [3, 5]
    for m in r["masks"]:
        assert set(m) == {"position", "candidates"} and len(m["candidates"]) == 3
        assert all(set(c) == {"token", "prob"} for c in m["candidates"])
        probs = [c["prob"] for c in m["candidates"]]
        assert probs == sorted(probs, reverse=True) and sum(probs) <= 1



def test_nsp_json(ckpt, capsys):  # in-process: same code path, saves a torch import
    assert main(["nsp", str(ckpt), "the cat eats the fish .", "it sleeps .", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert list(r) == ["is_next"] and 0 <= r["is_next"] <= 1


def test_inspect_and_text_outputs(ckpt, capsys):
    assert main(["inspect", str(ckpt), "the cat eats", "it sleeps", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r) == {"tokens", "segment_ids", "embedded_segment_ids", "attentions"}
    T = len(r["tokens"])
    assert r["segment_ids"] == [0] * 5 + [1] * 3 and T == 8
    assert r["embedded_segment_ids"] == r["segment_ids"]  # a 0/1 model embeds the API's types as they are
    assert len(r["attentions"]) == 2 and len(r["attentions"][0]) == 2
    assert len(r["attentions"][0][0]) == T and len(r["attentions"][0][0][0]) == T
    assert abs(sum(r["attentions"][1][1][0]) - 1) < 1e-4
    assert main(["inspect", str(ckpt), "the cat eats"]) == 0
    assert "[CLS] the cat eats [SEP]" in capsys.readouterr().out
    assert main(["fill-mask", str(ckpt), "the [MASK] eats"]) == 0
    assert "[MASK] at position 2" in capsys.readouterr().out
    assert main(["nsp", str(ckpt), "a", "b"]) == 0
    assert "P(IsNext)" in capsys.readouterr().out


def test_mask_json(corpus_file, capsys):
    assert main(["mask", "--corpus", str(corpus_file), "--draws", "300", "--seed", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert list(r) == ["draws", "tokens_seen", "selected_rate", "mask_share", "random_share", "keep_share"]
    assert r["draws"] == 300 and r["tokens_seen"] > 1000
    assert abs(r["selected_rate"] - 0.15) < 0.03 and abs(r["mask_share"] - 0.8) < 0.08
    assert abs(r["mask_share"] + r["random_share"] + r["keep_share"] - 1) < 1e-6


def test_export_import_hf(ckpt, tmp_path):
    p = run("export-hf", ckpt, tmp_path / "hf")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "model.safetensors").is_file()
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    from bertcore.io.checkpoint import load_checkpoint
    from bertcore.analysis.inference import fill_mask

    a, b = load_checkpoint(ckpt), load_checkpoint(tmp_path / "back")
    ra = fill_mask(a.model, a.tokenizer, "the cat [MASK] .", top_k=3)
    rb = fill_mask(b.model, b.tokenizer, "the cat [MASK] .", top_k=3)
    assert [t for t, _ in ra.masks[0].candidates] == [t for t, _ in rb.masks[0].candidates]


def test_bad_inputs_subprocess(ckpt, corpus_file, tmp_path):
    assert_bad(run())  # no command
    assert_bad(run("fill-mask", tmp_path / "missing", "a [MASK]"))
    p = run("fill-mask", ckpt, "no mask here")
    assert_bad(p)
    assert "[MASK]" in p.stderr
    p = run("train", "--out", tmp_path / "o", "--corpus", corpus_file, "--set", "bogus=1")
    assert_bad(p)
    assert "bogus" in p.stderr and "hidden_size" in p.stderr  # lists the valid keys
    p = run("--help")
    assert p.returncode == 0 and "fill-mask" in p.stdout and "export-hf" in p.stdout


@pytest.mark.parametrize("argv,needle", [
    (["train", "--resume", "X", "--steps", "5"], "--resume"),
    (["train", "--resume", "X"], "run.json"),
    (["train", "--out", "X", "--set", "hidden_size=abc"], "hidden_size"),
    (["train", "--out", "X", "--set", "hidden_size"], "KEY=VALUE"),
    (["train", "--out", "X", "--set", "hidden_size=30", "--set", "num_attention_heads=4"], "divisible"),
    (["train", "--out", "X", "--set", "lr=-1"], "lr"),
    (["train", "--out", "X", "--steps", "0"], "--steps"),
    (["train", "--out", "X", "--steps", "1e12"], "--steps"),
    (["train", "--out", "X", "--set", "max_seq_len=500"], "max_position_embeddings"),
    (["train", "--out", "X", "--corpus", "/no/such/corpus.txt"], "corpus.txt"),
    (["train", "--out", "X", "--preset", "nope"], "preset"),
    (["train", "--out", "X", "--set", "hidden_size=4096", "--set", "num_hidden_layers=48"], "BERTCORE_MAX_MODEL_MB"),
    (["mask", "--draws", "-5"], "--draws"),
    (["mask", "--draws", "999999999"], "--draws"),
    (["mask", "--set", "hidden_size=64"], "model config"),
    (["fill-mask", "DIR"], "text"),
    (["fill-mask", "DIR", "a [MASK]", "--top-k", "0"], "--top-k"),
    (["nsp", "DIR", "only one"], "b"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_in_process(argv, needle, capsys, tmp_path):
    argv = [str(tmp_path / a) if a in ("X", "DIR") else a for a in argv]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("text", ["", "   ", "the cat " * 100 + "[MASK]"])
def test_bad_text_in_process(ckpt, text, capsys):
    assert main(["fill-mask", str(ckpt), text]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_broken_checkpoint_in_process(ckpt, tmp_path, capsys):
    import shutil

    d = tmp_path / "broken"
    shutil.copytree(ckpt, d)
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    assert main(["nsp", str(d), "a", "b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "pickle" in err
    (tmp_path / "file").write_text("x")
    assert main(["train", "--out", str(tmp_path / "file"), "--steps", "1"]) == 2
    assert "file" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT semantics")
def test_ctrl_c_saves(corpus_file, tmp_path):
    out = tmp_path / "interrupted"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "bertcore", "train", "--out", str(out), "--corpus",
                             str(corpus_file), "--steps", "100000", *TINY], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                            # Ctrl-C at a terminal: SIGINT is never ignored there, even when this test runs
                            # under `nohup` or `cmd &` (which make it ignored for every child)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    buf = ""
    while time.monotonic() < deadline and "step" not in buf:  # wait for the progress bar
        chunk = os.read(proc.stderr.fileno(), 4096).decode(errors="replace")
        if not chunk:
            break
        buf += chunk
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    try:
        out_s, err_s = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # stuck: show where (bertcore/__main__.py dumps every thread on SIGUSR1)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(3)
        proc.kill()
        _, err_s = proc.communicate()
        pytest.fail(f"train did not end within 60 s of Ctrl-C; its threads:\n{err_s[-8000:]}")
    assert proc.returncode == 130, err_s
    assert "interrupted at step" in err_s and "Traceback" not in err_s + buf
    assert (out / "model.safetensors").is_file() and (out / "history.csv").is_file()
    from bertcore.io.checkpoint import load_checkpoint

    b = load_checkpoint(out)
    assert 0 < len(b.history) < 100000
