"""Head roles (bertcore.analysis.heads, Clark et al. 2019) and the pruning curve (bertcore.analysis.pruning,
Michel et al. 2019), against known answers: hand-made attention maps, a hand-set model whose heads look only at
the previous / next token, finite differences of the loss, and a model whose layer has its values zeroed."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bertcore.analysis import ablation, heads, pruning
from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.data.pretraining import MaskingRates, PretrainingData
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import InputError
from bertcore.model.bert import BertForPreTraining, init_model

torch.set_num_threads(1)
TOKENS = ["[CLS]", "the", "cow", "eats", ".", "[SEP]", "it", "sleeps", ",", "[SEP]"]


def _one_text(A: np.ndarray, tokens=TOKENS) -> dict:
    out = heads.pooled_measures([heads.measure_sums(A, tokens)])
    out["roles"] = heads.roles_from(out)
    return out


def _shifted(T: int, k: int) -> np.ndarray:
    """[T, T]: query i attends only to i + k (rows without such a key: uniform)."""
    A = np.zeros((T, T))
    for i in range(T):
        if 0 <= i + k < T:
            A[i, i + k] = 1.0
        else:
            A[i] = 1.0 / T
    return A


def test_hand_made_maps_get_their_roles():
    T = len(TOKENS)
    cls, sep, punct = np.zeros((T, T)), np.zeros((T, T)), np.zeros((T, T))
    cls[:, 0] = 1.0
    sep[:, [5, 9]] = 0.5
    punct[:, [4, 8]] = 0.5
    maps = [_shifted(T, -1), _shifted(T, 1), np.eye(T), cls, sep, punct, np.full((T, T), 1.0 / T)]
    A = np.stack(maps)[None]  # [1, 7, T, T]
    r = _one_text(A)
    assert r["roles"][0] == ["previous-token", "next-token", "self", "[CLS]", "[SEP]", "punctuation", "broad"]
    assert r["to_prev"][0, 0] == pytest.approx(1.0) and r["to_next"][0, 1] == pytest.approx(1.0)
    assert r["to_self"][0, 2] == pytest.approx(1.0) and r["to_sep"][0, 4] == pytest.approx(1.0)
    assert r["to_punct"][0, 5] == pytest.approx(1.0) and r["to_cls"][0, 3] == pytest.approx(1.0)
    assert r["entropy"][0, 6] == pytest.approx(np.log(T)) and r["max_entropy"] == pytest.approx(np.log(T))
    assert r["entropy"][0, 0] == pytest.approx(np.log(T) / T)  # only [CLS]'s uniform row has entropy


def test_thresholds_and_mixed():
    T = len(TOKENS)
    A = 0.49 * _shifted(T, -1) + 0.51 * np.eye(T)
    B = 0.45 * _shifted(T, -1) + 0.45 * np.eye(T) + 0.1 * _shifted(T, 1)  # no majority, low entropy
    r = _one_text(np.stack([A, B])[None])
    assert r["roles"][0] == ["self", "mixed"]
    v = dict.fromkeys(heads.MEASURES, 0.0)
    assert heads.role_of({**v, "to_prev": 0.5, "to_self": 0.5}, 2.0) == "previous-token"  # a tie: SHARE_ROLES order
    assert heads.role_of({**v, "to_sep": 0.49, "to_self": 0.51}, 2.0) == "self"  # the larger share
    assert heads.role_of({**v, "to_sep": 0.6, "to_self": 0.51}, 2.0) == "[SEP]"
    assert heads.role_of({**v, "entropy": 1.6}, 2.0) == "broad"  # BROAD_FRACTION x max entropy
    assert heads.role_of({**v, "entropy": 1.59}, 2.0) == "mixed"


def test_pads_are_left_out():
    T = len(TOKENS)
    A = _shifted(T, -1)
    padded = np.zeros((T + 2, T + 2))
    padded[:T, :T] = A
    padded[T:, :] = 1.0 / (T + 2)  # pad queries: ignored
    r1 = _one_text(A[None, None])
    r2 = _one_text(padded[None, None], TOKENS + ["[PAD]", "[PAD]"])
    for k in heads.MEASURES:
        assert r1[k][0, 0] == pytest.approx(r2[k][0, 0])
    assert r2["max_entropy"] == pytest.approx(np.log(T))


def test_punctuation_tokens():
    assert all(heads.is_punctuation(t) for t in (".", ",", "?", "##.", "...", "—"))
    assert not any(heads.is_punctuation(t) for t in ("[CLS]", "<sos>", "[SEP]", "cow", "a.b", "", "##"))


def test_parse_texts():
    assert heads.parse_texts("the cow .\n\nA b .\tc d .\n") == ["the cow .", ("A b .", "c d .")]
    for bad in ("a\tb\tc", "a\t ", "\n \n"):
        with pytest.raises(InputError):
            heads.parse_texts(bad)


def shift_model(words: list[str]) -> tuple[BertForPreTraining, WordTokenizer]:
    """One layer, two heads of size P: head 0 attends only to the previous token, head 1 only to the next.

    Embeddings: word and segment rows 0, position p = c * (e_p in head 0's slice + e_p in head 1's slice), no
    embedding LayerNorm, so the attention input x_i is exactly that. Keys = x; head 0's query maps e_i to
    beta * e_{i-1}, head 1's to beta * e_{i+1}: the score of key j is beta c^2 [j = i -+ 1] / sqrt(P)."""
    tok = WordTokenizer.build([" ".join(words)])
    P = 16
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=2 * P, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=8, max_position_embeddings=P, embedding_layer_norm=False)
    model = init_model(cfg, seed=0)
    c, beta = 1.0, 200.0
    with torch.no_grad():
        emb = model.bert.embeddings
        emb.word_embeddings.weight.zero_()
        emb.token_type_embeddings.weight.zero_()
        pos = torch.zeros(P, 2 * P)
        pos[torch.arange(P), torch.arange(P)] = c
        pos[torch.arange(P), P + torch.arange(P)] = c
        emb.position_embeddings.weight.copy_(pos)
        att = model.bert.encoder.layer[0].attention.self
        att.key.weight.copy_(torch.eye(2 * P))
        q = torch.zeros(2 * P, 2 * P)
        for i in range(P):
            if i >= 1:
                q[i - 1, i] = beta  # head 0: query of position i points at key i-1
            if i + 1 < P:
                q[P + i + 1, P + i] = beta  # head 1: at key i+1
        att.query.weight.copy_(q)
        att.query.bias.zero_()
        att.key.bias.zero_()
    model.eval()
    return model, tok


def test_a_hand_set_model_has_a_previous_token_and_a_next_token_head():
    words = "the cow eats grass . it sleeps".split()
    model, tok = shift_model(words)
    r = heads.head_measures(model, tok, ["the cow eats grass .", ("the cow", "it sleeps ."), "it"])
    assert r["roles"] == [["previous-token", "next-token"]]
    assert r["to_prev"][0, 0] > 0.999 and r["to_next"][0, 1] > 0.999
    assert r["to_next"][0, 0] < 0.1 and r["to_prev"][0, 1] < 0.1  # only the uniform rows with no prev / next key


def test_final_role_steps():
    roles = [[["broad", "broad"]], [["mixed", "[SEP]"]], [["broad", "[SEP]"]], [["broad", "[SEP]"]]]
    assert heads.final_role_steps([0, 10, 20, 30], roles) == [[20, 10]]
    assert heads.final_role_steps([5], [[["mixed"]]]) == [[5]]


@pytest.fixture(scope="module")
def trained():
    """A tiny model trained for a few steps, its tokenizer, and a held-out batch."""
    corpus = builtin_corpus(seed=0, n_pairs=600)
    tok = WordTokenizer.build(corpus.texts())
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=48)
    model = init_model(cfg, seed=1)
    tc = TrainConfig(max_seq_len=48, seed=1, held_out_frac=0.1)
    data = PretrainingData(corpus, tok, 48, MaskingRates(), 0.5, 0.1, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(30):
        b = data.sample_batch(32, g)
        out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                    mlm_labels=b["mlm_labels"], nsp_labels=b["nsp_labels"])
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.eval()
    batches = ablation.held_out_batches(tok, corpus, tc.to_dict(), 64, max_len=48)
    return model, tok, batches


def test_importance_is_the_absolute_gradient_of_the_loss_wrt_the_head_mask(trained):
    model, _, batches = trained
    batch = batches[:1]
    imp = pruning.gradient_importance(model, batch)
    b = batch[0]
    eps = 1e-2

    def loss(mask):
        with torch.no_grad():
            out = model(b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                        mlm_labels=b["mlm_labels"], nsp_labels=b["nsp_labels"], head_mask=mask)
        return float(out.mlm_loss + out.nsp_loss)

    for layer in range(2):
        for h in range(2):
            up, down = torch.ones(2, 2), torch.ones(2, 2)
            up[layer, h] += eps
            down[layer, h] -= eps
            fd = abs(loss(up) - loss(down)) / (2 * eps)
            assert float(imp[layer, h]) == pytest.approx(fd, rel=2e-2, abs=1e-4)


def test_pruning_curve_starts_unablated_and_removes_least_important_first(trained):
    model, _, batches = trained
    c = pruning.pruning_curve(model, batches)
    assert c["points"][0] == {"removed": 0, "heads_left": 4, **ablation.evaluate(model, batches)}
    imp = {(r["layer"], r["head"]): r["importance"] for r in c["importance"]}
    order = [(o["layer"], o["head"]) for o in c["order"]]
    assert sorted(order) == sorted(imp) and [imp[o] for o in order] == sorted(imp.values())
    for k, p in enumerate(c["points"]):
        assert p["removed"] == k
        assert p == {"removed": k, "heads_left": 4 - k,
                     **ablation.evaluate(model, batches, ablation.head_mask_for(order[:k], 2, 2))}
    assert c["points"][-1] != c["points"][0]


def test_removing_every_head_of_a_layer_equals_zeroing_its_values(trained):
    model, _, batches = trained
    imp = torch.tensor([[0.0, 0.1], [1.0, 2.0]])  # layer 0's heads first
    c = pruning.pruning_curve(model, batches, importance=imp)
    assert [(o["layer"], o["head"]) for o in c["order"][:2]] == [(0, 0), (0, 1)]
    zeroed = BertForPreTraining(model.config)
    zeroed.load_state_dict(model.state_dict())
    with torch.no_grad():
        v = zeroed.bert.encoder.layer[0].attention.self.value
        v.weight.zero_()
        v.bias.zero_()
    want = ablation.evaluate(zeroed, batches)
    for k in want:
        assert c["points"][2][k] == pytest.approx(want[k], abs=1e-5)
