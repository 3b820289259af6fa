"""The MLM decoder fused with its loss (bertcore.model.functional.linear_cross_entropy_and_hits, used by a training
step through bertcore.model.mlm_loss): the same cross-entropy over the whole vocabulary, the same gradients and the
same hit count as F.linear + F.cross_entropy + argmax; evaluation still goes through the (N, V) logits."""
import pytest
import torch
import torch.nn.functional as F

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpus import builtin_corpus
from bertcore.model.bert import init_model
from bertcore.model.functional import linear_cross_entropy_and_hits
from bertcore.training.trainer import Trainer


def _case(n, v, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(dtype)
    w = (torch.randn(v, d, generator=g) * 0.5).to(dtype)
    b = torch.randn(v, generator=g).to(dtype)
    t = torch.randint(0, v, (n,), generator=g)
    return h, w, b, t


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, None])
def test_value_gradients_and_hits_equal_the_logits_path(chunk):
    for dtype, tol in ((torch.float32, 2e-6), (torch.float64, 1e-12)):
        h, w, b, t = _case(23, 301, 16, dtype)
        h[4], t[4], t[5] = 0.0, 0, 1
        b[0] = 40.0  # row 4's target has the top logit by far
        b[1] = -200.0  # the softmax underflows to 0 at row 5's target: the loss stays finite and exact
        mine = [x.clone().requires_grad_() for x in (h, w, b)]
        ref = [x.clone().requires_grad_() for x in (h, w, b)]
        loss, hits = linear_cross_entropy_and_hits(*mine, t, chunk=chunk)
        (loss * 1.7).backward()
        logits = F.linear(*ref)
        expected = F.cross_entropy(logits, t)
        (expected * 1.7).backward()
        assert loss.dtype == dtype and abs(loss.item() - expected.item()) < tol * 10
        assert int(hits) == int((logits.argmax(-1) == t).sum())
        for a, r in zip(mine, ref):
            torch.testing.assert_close(a.grad, r.grad, atol=tol, rtol=0)


def test_no_bias_no_grad_and_empty():
    h, w, _, t = _case(10, 50, 8, torch.float64, seed=1)
    with torch.no_grad():
        loss, hits = linear_cross_entropy_and_hits(h, w, None, t, chunk=4)
    assert abs(loss.item() - F.cross_entropy(h @ w.T, t).item()) < 1e-12
    assert int(hits) == int(((h @ w.T).argmax(-1) == t).sum())
    empty, none = linear_cross_entropy_and_hits(torch.randn(0, 8, requires_grad=True), w, None,
                                                torch.zeros(0, dtype=torch.long))
    assert empty.item() == 0.0 and int(none) == 0
    hg = h.clone().requires_grad_()
    loss, _ = linear_cross_entropy_and_hits(hg, w, None, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward once"):  # its kept gradients were scaled in place
        loss.backward()


def test_under_autocast_it_is_the_logits_path():
    """A bf16 run keeps autocast's decoder: the same numbers as F.linear + cross_entropy_and_hits under autocast."""
    from bertcore.model.functional import cross_entropy_and_hits

    h, w, b, t = _case(12, 90, 16, torch.float32, seed=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, hits = linear_cross_entropy_and_hits(h, w, b, t)
        ref, ref_hits = cross_entropy_and_hits(F.linear(h, w, b), t)
    assert loss.item() == ref.item() and int(hits) == int(ref_hits)


@pytest.mark.parametrize("head", ["transform", "linear", "mlp"])
def test_model_loss_only_equals_the_logits_path(head):
    """BertForPreTraining(return_mlm_logits=False): the same MLM loss, hits and gradient of every parameter."""
    cfg = BertConfig(vocab_size=300, mlm_head=head)
    a, b = init_model(cfg, 3), init_model(cfg, 3)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 300, (4, 12), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 3], labels[1, 5], labels[2, 9] = ids[:, 3], 7, ids[2, 9]
    nsp = torch.tensor([0, 1, 0, 1])
    full = a(ids, mlm_labels=labels, nsp_labels=nsp)
    full.loss.backward()
    fused = b(ids, mlm_labels=labels, nsp_labels=nsp, return_mlm_logits=False)
    fused.loss.backward()
    assert fused.mlm_logits is None and full.mlm_logits.shape == (6, 300)
    expected = F.cross_entropy(full.mlm_logits, labels[labels != -100])
    assert abs(fused.mlm_loss.item() - expected.item()) < 1e-6
    assert int(fused.mlm_hits) == int((full.mlm_logits.argmax(-1) == labels[labels != -100]).sum())
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=2e-6, rtol=1e-5, msg=name)


def test_trainer_steps_fused_and_evaluates_the_full_cross_entropy():
    """A training step takes the fused path and gives the logits path's run; the held-out MLM loss is the plain
    cross-entropy over the whole vocabulary at the masked positions of the fixed evaluation batches."""
    corpus = builtin_corpus()
    tc = TrainConfig(steps=6, batch_size=32, eval_every=0, snapshot_every=0, eval_size=64)
    fused = Trainer(BertConfig(), tc, corpus)
    plain = Trainer(BertConfig(), tc, corpus)
    assert fused._loss_only == {"return_mlm_logits": False}
    plain._loss_only = {}  # the (N, V) logits, then the loss: the path before the fused one
    for _ in range(5):
        rf, rp = fused.step(), plain.step()
        assert abs(rf["mlm_loss"] - rp["mlm_loss"]) < 1e-4 and rf["mlm_acc"] == rp["mlm_acc"]
    ev = fused.evaluate()
    model = fused.model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in fused._eval_batches:
            out = model(batch["input_ids"], token_type_ids=batch["token_type_ids"],
                        attention_mask=batch["attention_mask"])
            sel = batch["mlm_labels"] != -100
            total += F.cross_entropy(out.mlm_logits[sel], batch["mlm_labels"][sel], reduction="sum").item()
            count += int(sel.sum())
    assert abs(ev["eval_mlm_loss"] - total / count) < 1e-5
