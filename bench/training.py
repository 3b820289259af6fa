"""Training and FLOP measurements of ``python -m bench``: bertcore against HF transformers on this machine.

In one run, side by side on identical batches and hyperparameters:

* **training steps/s**, bertcore (``Trainer.step`` itself, fed fixed batches) vs transformers'
  ``BertForPreTraining`` (sdpa attention, the same dropout, AdamW lr / weight decay / warmup / clipping),
  in alternating blocks (A B B A ...) so drift and other load hit both alike, each block the same number of
  steps for both, so both are timed over the same stretch of training;
* **achieved GFLOP/s** as a share of the fp32 matmul peak measured in the same run (see ``FLOPS_FORMULA``);
* in ``bench.user`` (and ``bench.app`` for the app), what a user feels: **time to skill** at the app's default config (wall time to 2x
  the unigram baseline on held-out masked tokens); **inference** latency of ``fill_mask`` / ``inspect_pair``
  (all attentions) for a 32-token pair and the packaged all-MiniLM-L6-v2's load time and inspect latency;
  **app** (full run only): cold start in chromium, Attention-page rerun, in-app training speed while the UI polls.

No timing is asserted anywhere: the numbers are for reading (docs/BENCH.md).
"""
from __future__ import annotations

import math
import os
import platform
import statistics
import time

import torch  # noqa: E402

import bertcore  # noqa: F401, E402 - sets OMP_WAIT_POLICY before torch is imported

CONFIGS = {  # name: (vocab, hidden, layers, heads, ffn, seq, batch): BERT-tiny to BERT-base shapes
    "tiny": (2000, 64, 2, 4, 256, 32, 32),
    "small": (2000, 128, 2, 4, 512, 64, 32),
    "base4": (5000, 256, 4, 4, 1024, 64, 32),
}
FLOPS_FORMULA = (
    "training FLOPs/step = 3 x forward (backward ~ 2 x forward). Forward, per layer on B*T tokens: "
    "2*B*T*(4*D^2 + 2*D*F) [QKV, output, FFN matmuls] + 4*B*T^2*D [QK^T and PV]; plus pooler/NSP 2*B*(D^2+2D) "
    "and the MLM head 2*N*(D^2 + D*V). transformers: N = B*T (logits everywhere). bertcore, the work it actually "
    "does: N = masked positions, and its last layer runs K,V on all B*T tokens (2*B*T*2D^2) but Q on B*M padded "
    "query slots (2*B*M*D^2), attention 4*B*M*T*D and output+FFN on R = masked + [CLS] rows (2*R*(D^2+2DF)), "
    "since the losses read only those rows. 'useful' = the textbook count every model needs: full encoder on "
    "B*T tokens + MLM head at the masked positions only. Embedding lookups, LayerNorm, softmax, GELU and the "
    "optimizer are not counted; T is the padded sequence length."
)


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def machine_info(threads: int) -> dict:
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    return {"cpu": cpu, "logical_cores": os.cpu_count(), "torch_threads": threads, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "platform": platform.platform(),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"), "loadavg_start": loadavg()}


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def matmul_peak(quick: bool) -> dict:
    """fp32 GFLOP/s of a large square torch.mm: the best of several timed repeats."""
    n = 1024 if quick else 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(6 if quick else 10):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return {"n": n, "gflops": 2 * n ** 3 / best / 1e9}


# ----------------------------------------------------------------------------- data
def padded_tokenizer(corpus, size: int):
    """The corpus' word vocabulary (WordTokenizer.build(max_size=size)) topped up with BERT-style
    ``[unusedN]`` rows to exactly ``size``: the built-in grammar has far fewer words than 2000/5000."""
    from bertcore.data.tokenization import WordTokenizer

    tok = WordTokenizer.build(corpus.texts(), max_size=size)
    vocab = list(tok.vocab)
    vocab += [f"[unused{i}]" for i in range(size - len(vocab))]
    return WordTokenizer(vocab)


def long_pairs(corpus, T: int):
    """Pairs whose A and B each join several consecutive built-in sentences, so that every
    ``[CLS] A [SEP] B [SEP]`` fills (and is truncated to) the config's T tokens: the built-in pairs are
    at most ~25 tokens, and padding them to 64 would make both models spend most of their time on [PAD]."""
    from bertcore.data.corpus import Corpus

    sents = corpus.sentences()
    k = T // 16 + 1  # sentences of ~8 words each per side
    pairs = [(" ".join(sents[i:i + k]), " ".join(sents[i + k:i + 2 * k])) for i in range(0, len(sents) - 2 * k, k)]
    return Corpus(f"{corpus.name} (joined x{k})", pairs, "built-in sentences joined to fill the sequence")


def pad_to(batch: dict, T: int, pad_id: int) -> dict:
    """Pad (or cut) every [B, t] tensor to exactly T columns."""
    fill = {"input_ids": pad_id, "token_type_ids": 0, "attention_mask": 0, "mlm_labels": -100}
    out = dict(batch)
    for k, v in fill.items():
        x = batch[k][:, :T]
        if x.shape[1] < T:
            x = torch.cat([x, torch.full((x.shape[0], T - x.shape[1]), v, dtype=x.dtype)], 1)
        out[k] = x
    return out


def hf_model(cfg, seed: int = 0):
    """transformers.BertForPreTraining with the same sizes, dropout and init range, sdpa attention."""
    import transformers

    hc = transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
        hidden_dropout_prob=cfg.hidden_dropout_prob, attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
        layer_norm_eps=cfg.layer_norm_eps, hidden_act=cfg.hidden_act, initializer_range=cfg.initializer_range,
        pad_token_id=cfg.pad_token_id, attn_implementation="sdpa")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.BertForPreTraining(hc).train()


class HFStep:
    """The transformers side of one training step: same AdamW groups / lr / decay / warmup / clipping as
    bertcore's Trainer, torch's default AdamW implementation (what a transformers user gets)."""

    def __init__(self, model, tc):
        from bertcore.training.optim import lr_schedule

        self.model, self.tc = model, tc
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            (no_decay if p.ndim < 2 or "LayerNorm" in name or name.endswith("bias") else decay).append(p)
        self.params = decay + no_decay
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=tc.lr)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_schedule(tc.warmup_steps, tc.steps))

    def __call__(self, b: dict) -> float:
        m = self.model
        m.train()
        out = m(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                labels=b["mlm_labels"], next_sentence_label=b["nsp_labels"])
        self.opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.tc.grad_clip)
        self.opt.step()
        self.sched.step()
        return float(out.loss.detach())

    @torch.no_grad()
    def accuracy(self, batches) -> float:
        m = self.model
        m.eval()
        ok = n = 0
        for b in batches:
            logits = m(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                       attention_mask=b["attention_mask"]).prediction_logits
            sel = b["mlm_labels"] != -100
            ok += int((logits[sel].argmax(-1) == b["mlm_labels"][sel]).sum())
            n += int(sel.sum())
        m.train()
        return ok / max(n, 1)


def flops_per_step(cfg, B: int, T: int, n_sel: float, mlm_everywhere: bool, rows: float | None = None,
                   slots: float | None = None) -> float:
    """Training FLOPs of one step (see FLOPS_FORMULA). ``rows``/``slots`` given: bertcore's pruned last layer."""
    D, F, V, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    layer = 2 * B * T * (4 * D * D + 2 * D * F) + 4 * B * T * T * D
    fwd = L * layer + 2 * B * (D * D + 2 * D)
    if rows is not None:
        last = 2 * B * T * 2 * D * D + 2 * B * slots * D * D + 4 * B * slots * T * D + 2 * rows * (D * D + 2 * D * F)
        fwd += last - layer
    fwd += 2 * (B * T if mlm_everywhere else n_sel) * (D * D + D * V)
    return 3.0 * fwd


# ----------------------------------------------------------------------------- training speed
def bench_setup(name: str, corpus):
    """One of ``CONFIGS`` as the training benches run it: (model config, training config, tokenizer, pairs)."""
    from bertcore.config import BertConfig, TrainConfig

    V, D, L, H, F, T, B = CONFIGS[name]
    cfg = BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=F,
                     max_position_embeddings=max(64, T))
    tc = TrainConfig(batch_size=B, max_seq_len=T, eval_every=0, snapshot_every=0, steps=1_000_000,
                     num_threads=torch.get_num_threads())
    return cfg, tc, padded_tokenizer(corpus, V), long_pairs(corpus, T)


def bench_training(name: str, corpus, quick: bool, peak: float) -> dict:
    from bertcore.training.trainer import Trainer

    V, D, L, H, F, T, B = CONFIGS[name]
    cfg, tc, tok, pairs = bench_setup(name, corpus)
    tr = Trainer(cfg, tc, pairs, tokenizer=tok)
    g = torch.Generator().manual_seed(123)
    batches = [pad_to(tr.data.sample_batch(B, g), T, tok.pad_id) for _ in range(16)]
    feed = {"i": 0}

    def fixed_batch(batch_size, generator, split="train"):  # Trainer.step's own data call, on fixed batches
        feed["i"] += 1
        return batches[feed["i"] % len(batches)]

    tr.data.sample_batch = fixed_batch
    hf = HFStep(hf_model(cfg), tc)
    hf_i = {"i": 0}

    def hf_step():
        hf_i["i"] += 1
        hf(batches[hf_i["i"] % len(batches)])

    runners = {"bertcore": tr.step, "transformers": hf_step}
    for f in runners.values():  # warm-up (first optimizer step, allocator)
        for _ in range(3 if quick else 8):
            f()
    # Both run the same steps, in alternating blocks: a model's speed changes as it trains (denormal floats from
    # peaked attention slow both models' backward; docs/BENCH-HISTORY.md, "Training speed over the same steps"), so blocks
    # of equal time would set bertcore, further on in training, against transformers earlier on.
    block = 0.6 if quick else 2.5
    rounds = 2 if quick else 6
    t0 = time.perf_counter()
    for _ in range(2):
        hf_step()
    per_block = max(2, round(block * 2 / (time.perf_counter() - t0)))  # steps transformers runs in ~block s
    for _ in range(2):
        tr.step()
    steps = {k: 0 for k in runners}
    secs = {k: 0.0 for k in runners}
    ratios = []
    for r in range(rounds):
        order = ["bertcore", "transformers"] if r % 2 == 0 else ["transformers", "bertcore"]
        rate = {}
        for k in order:
            t0 = time.perf_counter()
            for _ in range(per_block):
                runners[k]()
            dt = time.perf_counter() - t0
            steps[k] += per_block
            secs[k] += dt
            rate[k] = per_block / dt
        ratios.append(rate["bertcore"] / rate["transformers"])
    sps = {k: steps[k] / secs[k] for k in runners}
    n_sel = statistics.mean(float((b["mlm_labels"] != -100).sum()) for b in batches)
    need = [(b["mlm_labels"] != -100) | (torch.arange(T) == 0) for b in batches]  # rows bertcore's last layer runs
    rows = statistics.mean(float(x.sum()) for x in need)
    slots = statistics.mean(float(x.sum(1).max()) for x in need)
    useful = flops_per_step(cfg, B, T, n_sel, False)
    work = {"bertcore": flops_per_step(cfg, B, T, n_sel, False, rows, slots),
            "transformers": flops_per_step(cfg, B, T, n_sel, True)}
    res = {"config": name, "vocab": V, "hidden": D, "layers": L, "heads": H, "ffn": F, "seq": T, "batch": B,
           "real_tokens_per_batch": statistics.mean(float(b["attention_mask"].sum()) for b in batches),
           "masked_per_batch": n_sel, "steps": steps,
           "bertcore_steps_s": sps["bertcore"], "hf_steps_s": sps["transformers"],
           # headline: the median of the per-round ratios (robust to a load spike in one block)
           "ratio": statistics.median(ratios), "ratio_of_totals": sps["bertcore"] / sps["transformers"],
           "ratio_per_round": ratios,
           "useful_gflop_per_step": useful / 1e9, "bertcore_gflop_per_step": work["bertcore"] / 1e9,
           "hf_gflop_per_step": work["transformers"] / 1e9, "last_layer_rows": rows, "last_layer_query_slots": slots}
    for k, short in (("bertcore", "bertcore"), ("transformers", "hf")):
        res[f"{short}_gflops"] = work[k] * sps[k] / 1e9
        res[f"{short}_peak_frac"] = res[f"{short}_gflops"] / peak
        res[f"{short}_useful_gflops"] = useful * sps[k] / 1e9
        res[f"{short}_useful_peak_frac"] = res[f"{short}_useful_gflops"] / peak
    return res


# ----------------------------------------------------------------------------- targets, output
def targets(r: dict) -> list[dict]:
    t = []
    for c in r.get("training", []):
        t.append({"target": f"{c['config']}: bertcore >= 1.6x transformers steps/s", "value": round(c["ratio"], 2),
                  "met": c["ratio"] >= 1.6})
    base4 = next((c for c in r.get("training", []) if c["config"] == "base4"), None)
    if base4:
        t.append({"target": "base4: bertcore >= 60% of measured matmul peak (FLOPs it actually computes)",
                  "value": round(base4["bertcore_peak_frac"], 3), "met": base4["bertcore_peak_frac"] >= 0.6})
    inf = r.get("inference", {})
    if "tiny" in inf:
        v = inf["tiny"]["inspect_pair"]["p50_ms"]
        t.append({"target": "tiny inspect (all attentions) p50 <= 3 ms", "value": round(v, 2), "met": v <= 3.0})
    mini = inf.get("minilm", {})
    if "load_s" in mini:
        t.append({"target": "MiniLM load <= 3 s after imports", "value": round(mini["load_s"], 2),
                  "met": mini["load_s"] <= 3.0})
        v = mini["inspect_pair"]["p50_ms"]
        t.append({"target": "MiniLM inspect 32-token pair, 72 heads <= 50 ms (p50)", "value": round(v, 1), "met": v <= 50})
    sk = r.get("time_to_skill")
    if sk:
        ours, theirs = sk["bertcore"]["time_to_skill_s"], sk["transformers"]["time_to_skill_s"]
        t.append({"target": "bertcore reaches 2x unigram before transformers", "value": [ours, theirs],
                  "met": ours is not None and (theirs is None or ours < theirs)})
        t.append({"target": "default run reaches 2x unigram in <= 30 s", "value": ours,
                  "met": ours is not None and ours <= 30.0})
    app = r.get("app", {})
    if isinstance(app.get("training_in_app_frac"), (int, float)):
        t.append({"target": "in-app training >= 85% of headless steps/s", "value": round(app["training_in_app_frac"], 3),
                  "met": app["training_in_app_frac"] >= 0.85})
    return t


def _f(x, nd=1):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def render(r: dict) -> str:
    m = r["machine"]
    lines = [f"machine: {m['cpu']}, {m['logical_cores']} logical cores, torch {m['torch']} ({m['torch_threads']} threads), "
             f"transformers {m['transformers']}, load avg {m['loadavg_start']} -> {m.get('loadavg_end')}",
             f"fp32 matmul peak ({r['peak']['n']}^2 torch.mm): {r['peak']['gflops']:.1f} GFLOP/s", "",
             "| config | bertcore steps/s | transformers steps/s | ratio | bertcore GFLOP/s (% peak) | "
             "transformers GFLOP/s (% peak) | useful GFLOP/s (% peak): bertcore / transformers |",
             "|---|---|---|---|---|---|---|"]
    for c in r["training"]:
        lines.append(f"| {c['config']} | {c['bertcore_steps_s']:.1f} | {c['hf_steps_s']:.1f} | {c['ratio']:.2f}x | "
                     f"{c['bertcore_gflops']:.1f} ({100 * c['bertcore_peak_frac']:.0f}%) | {c['hf_gflops']:.1f} "
                     f"({100 * c['hf_peak_frac']:.0f}%) | {c['bertcore_useful_gflops']:.1f} ({100 * c['bertcore_useful_peak_frac']:.0f}%)"
                     f" / {c['hf_useful_gflops']:.1f} ({100 * c['hf_useful_peak_frac']:.0f}%) |")
    sk = r.get("time_to_skill") or {"marks_s": (0, 0), "skipped": True}
    a, b = sk["marks_s"]
    lines += [] if "skipped" in sk else ["", f"time to skill (held-out masked-token acc >= {sk['target_acc']:.3f} = 2x unigram "
              f"{sk['unigram_baseline']:.3f}; defaults, {sk['num_threads']} thread):",
              f"| model | time to skill (s) | step | acc @ {a:.0f}s | acc @ {b:.0f}s | steps done |", "|---|---|---|---|---|---|"]
    for k in ("bertcore", "transformers") if "skipped" not in sk else ():
        d = sk[k]
        lines.append(f"| {k} | {_f(d['time_to_skill_s'])} | {_f(d['step_at_skill'])} | {_f(d[f'acc_at_{int(a)}s'], 3)} | "
                     f"{_f(d[f'acc_at_{int(b)}s'], 3)} | {d['steps_done']} |")
    inf = r.get("inference") or {}
    lines += ["", "| inference (32-token pair) | p50 ms | p95 ms |", "|---|---|---|"] if inf else []
    for name in ("tiny", "base4") if inf else ():
        for op in ("fill_mask", "inspect_pair"):
            lines.append(f"| {name} {op} | {inf[name][op]['p50_ms']:.2f} | {inf[name][op]['p95_ms']:.2f} |")
    mini = inf.get("minilm", {"skipped": "inference not run (--only)"})
    if "load_s" in mini:
        lines.append(f"| MiniLM inspect_pair ({mini['heads']} heads) | {mini['inspect_pair']['p50_ms']:.1f} | "
                     f"{mini['inspect_pair']['p95_ms']:.1f} |")
        lines.append(f"\nMiniLM load (import_hf(packaged_minilm_dir()), after imports): {mini['load_s']:.2f} s "
                     f"(again: {mini['load_again_s']:.2f} s)")
    else:
        lines.append(f"\nMiniLM: {mini['skipped']}")
    app = r.get("app", {})
    lines += ["", "app:"] + [f"- {k}: {_f(v, 3) if isinstance(v, float) else v}" for k, v in app.items()]
    lines += ["", "targets:"] + [f"- [{'x' if t['met'] else ' '}] {t['target']}: {t['value']}" for t in r["targets"]]
    return "\n".join(lines)
