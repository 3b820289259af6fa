"""`heads RUN --texts FILE --json` and `ablate RUN --curve --json`: every number recomputed from an oracle.

The head measures are recomputed here, by plain loops, from the attentions that HF transformers gives for the
same texts on an ``export-hf`` copy of the run (``output_attentions=True``), and must agree to 1e-5."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from bertcore.analysis import ablation, heads
from bertcore.analysis.inference import encode_pair
from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.tokenization import canonical_special
from bertcore.io.checkpoint import load_checkpoint
from bertcore.io.hf_interop import export_hf
from bertcore.io.steps import list_steps, load_step
from bertcore.training.run_corpus import run_corpus
from bertcore.launch import service

torch.set_num_threads(1)
TEXTS = ["the cow eats grass .", "Ben reads a book in the library.\tHe walks to the school.",
         "the farmer , the cow and the dog .\tthey sleep .", "cow"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tc = TrainConfig(steps=20, batch_size=16, eval_every=10, eval_size=32, snapshot_every=10, warmup_steps=2, seed=2)
    spec = service.RunSpec(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=48), tc, name="heads")
    return service.train(spec, parent=tmp_path_factory.mktemp("runs")).run_dir


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("texts") / "texts.txt"
    p.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return p


def _json(capsys, *argv):
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def oracle_measures(attn_list, tokens_list) -> dict:
    """The seven measures by loops over every text, query and key (the module docstring's definitions)."""
    L, H = attn_list[0].shape[:2]
    out = {}
    for layer in range(L):
        for h in range(H):
            acc = {k: [] for k in heads.MEASURES}
            for A, toks in zip(attn_list, tokens_list):
                a = A[layer, h]
                T = len(toks)
                for i in range(T):
                    row = a[i]
                    acc["entropy"].append(-sum(p * np.log(p) for p in row if p > 0))
                    acc["to_self"].append(row[i])
                    acc["to_cls"].append(sum(row[j] for j in range(T) if canonical_special(toks[j]) == "[CLS]"))
                    acc["to_sep"].append(sum(row[j] for j in range(T) if canonical_special(toks[j]) == "[SEP]"))
                    acc["to_punct"].append(sum(row[j] for j in range(T) if toks[j] in {".", ","}))
                    if i >= 1:
                        acc["to_prev"].append(row[i - 1])
                    if i + 1 < T:
                        acc["to_next"].append(row[i + 1])
            out[(layer, h)] = {k: float(np.mean(v)) for k, v in acc.items()}
    return out


def _hf_attentions(run, tmp_path, step=None):
    bundle = load_step(run, step)
    hf_dir = export_hf(bundle, tmp_path / f"hf{step}")
    hf = transformers.BertForPreTraining.from_pretrained(hf_dir, attn_implementation="eager").eval()
    attn, toks = [], []
    for t in TEXTS:
        a, b = t.split("\t") if "\t" in t else (t, None)
        ids, types, _ = encode_pair(bundle.tokenizer, a, b, 48)
        with torch.no_grad():
            out = hf(torch.tensor([ids]), token_type_ids=torch.tensor([types]), output_attentions=True)
        attn.append(torch.stack(out.attentions)[:, 0].double().numpy())  # [L, H, T, T]
        toks.append(bundle.tokenizer.convert_ids_to_tokens(ids))
    return attn, toks


@pytest.mark.parametrize("step", [None, 10])
def test_heads_json_equals_measures_from_transformers_attentions(run, texts_file, tmp_path, capsys, step):
    args = ["heads", run, "--texts", texts_file, "--json"] + (["--step", step] if step is not None else [])
    got = _json(capsys, *args)
    want = oracle_measures(*_hf_attentions(run, tmp_path, step))
    assert got["n_texts"] == 4 and got["step"] == step and len(got["heads"]) == 4
    for row in got["heads"]:
        w = want[(row["layer"], row["head"])]
        for k in heads.MEASURES:
            assert row[k] == pytest.approx(w[k], abs=1e-5), (row["layer"], row["head"], k)
        assert row["role"] == heads.role_of(w, got["max_entropy"])


def test_heads_all_steps(run, texts_file, capsys):
    got = _json(capsys, "heads", run, "--texts", texts_file, "--all-steps", "--json")
    assert got["steps"] == list_steps(run) == [0, 10, 20]
    for p in got["per_step"]:
        one = _json(capsys, "heads", run, "--texts", texts_file, "--step", p["step"], "--json")
        if p["step"] == 20:  # the last saved step is the run's float32 checkpoint, as on the page
            one = _json(capsys, "heads", run, "--texts", texts_file, "--json")
        assert p["heads"] == one["heads"]
    roles = [[[r["role"] for r in p["heads"] if r["layer"] == layer] for layer in range(2)] for p in got["per_step"]]
    finals = heads.final_role_steps(got["steps"], roles)
    assert [(r["layer"], r["head"], r["step"]) for r in got["final_role"]] == \
        [(layer, h, finals[layer][h]) for layer in range(2) for h in range(2)]


def test_heads_default_texts_are_held_out_pairs(run, capsys):
    got = _json(capsys, "heads", run, "--examples", 8, "--json")
    assert got["n_texts"] == 8 and "held-out" in got["texts"]


def test_heads_bad_input(run, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("a\tb\tc\n")
    assert main(["heads", str(run), "--texts", str(bad)]) == 2
    assert "line 1" in capsys.readouterr().err
    assert main(["heads", str(run), "--step", "7"]) == 2
    assert "0, 10, 20" in capsys.readouterr().err


def test_ablate_curve_json(run, capsys):
    got = _json(capsys, "ablate", run, "--curve", "--examples", 32, "--json")
    b = load_checkpoint(run)
    batches = ablation.held_out_batches(b.tokenizer, run_corpus(run), b.train_config, 32, max_len=48)
    assert got["points"][0] == {"removed": 0, "heads_left": 4, **ablation.evaluate(b.model, batches)}
    imp = {(r["layer"], r["head"]): r["importance"] for r in got["importance"]}
    assert [imp[(o["layer"], o["head"])] for o in got["order"]] == sorted(imp.values())
    assert [p["removed"] for p in got["points"]] == [0, 1, 2, 3, 4]
    assert main(["ablate", str(run), "--curve", "--heads", "0.1"]) == 2
