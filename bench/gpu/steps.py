"""The step table of ``python -m bench.gpu``: bertcore's ``Trainer.step`` against transformers'
``BertForPreTraining`` on one device, at four shapes (BERT-tiny default, mini, small, base), fp32 and bf16.

Both sides get the same fixed, pinned CPU batches (MLM §3.1 masks and NSP §3.2 pairs drawn once from the built-in
sentences joined to fill the sequence, as ``bench.training`` does), the same AdamW groups, learning rate, warmup and
clipping; transformers runs sdpa attention and torch's fused AdamW, its forward under the same bf16 autocast. They
run in alternating blocks (A B B A ...) of equal step counts, so drift hits both alike. Each side's peak memory
is taken on its own warm-up (``torch.cuda.max_memory_allocated`` less what was allocated before it was built).
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import time

import torch

from bertcore.training.flops import train_flops_per_step
from bench.training import hf_model, long_pairs, pad_to, padded_tokenizer

# name: (vocab, hidden, layers, heads, ffn, seq, batch), as in docs/BENCH.md's GPU table
SHAPES = {
    "tiny": (2000, 64, 2, 4, 256, 48, 256),  # the app's default model and batch
    "mini": (30522, 256, 4, 4, 1024, 128, 128),  # BERT-mini (Turc et al. 2019) with BERT's vocabulary
    "small": (30522, 512, 4, 8, 2048, 128, 128),
    "base": (30522, 768, 12, 12, 3072, 128, 128),  # BERT-base (Devlin et al. 2019, §3)
}
QUICK_SHAPES = {"tiny": (2000, 64, 2, 4, 256, 48, 32)}  # --quick: the tiny model at a CPU-sized batch
N_BATCHES = 8  # fixed batches cycled through by both sides


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    """Give the memory of the models just dropped back (the next shape starts from an empty card)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class FixedBatches:
    """A Trainer's ``data`` that hands out the same pinned batches over and over: ``Trainer.step`` then does its
    whole step (copy, forward, backward, clipping, AdamW, its row) and no batch building."""

    def __init__(self, tokenizer, batches: list[dict]):
        self.tokenizer, self.batches = tokenizer, batches
        self.global_batch_size = int(batches[0]["input_ids"].shape[0])

    def step_batches(self, step: int) -> list[dict]:
        return [self.batches[step % len(self.batches)]]

    def fixed_eval_batches(self, n_examples: int, seed: int, batch_size: int = 64) -> list[dict]:
        return self.batches[:1]

    def unigram_baseline(self) -> float:
        return 0.0

    def probe_ids(self) -> tuple[list[int], list[int]]:
        b = self.batches[0]
        return b["input_ids"][0].tolist(), b["token_type_ids"][0].tolist()


def shape_configs(shape: tuple):
    """(BertConfig, TrainConfig) of one shape: BERT's defaults otherwise (dropout 0.1, lr 1e-4 schedule...)."""
    from bertcore.config import BertConfig, TrainConfig

    V, D, L, H, F, T, B = shape
    cfg = BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=F,
                     max_position_embeddings=max(512, T))
    tc = TrainConfig(batch_size=B, max_seq_len=T, eval_every=0, snapshot_every=0, steps=1_000_000)
    return cfg, tc


def fixed_batches(shape: tuple, corpus, device: torch.device, seed: int = 123):
    """(tokenizer, batches): ``N_BATCHES`` batches of exactly B x T tokens, pinned when the device is a GPU."""
    from bertcore.data.pretraining import MaskingRates, PretrainingData

    V, T, B = shape[0], shape[5], shape[6]
    _, tc = shape_configs(shape)
    tok = padded_tokenizer(corpus, V)
    data = PretrainingData(long_pairs(corpus, T), tok, T, MaskingRates.from_train_config(tc), tc.nsp_positive_prob,
                           tc.held_out_frac, tc.seed)
    g = torch.Generator().manual_seed(seed)
    batches = [pad_to(data.sample_batch(B, g), T, tok.pad_id) for _ in range(N_BATCHES)]
    if device.type == "cuda":
        batches = [{k: v.pin_memory() for k, v in b.items()} for b in batches]
    return tok, batches


class HFTrainStep:
    """One transformers training step as a careful user writes it: the batch copied ``non_blocking``, the forward
    under autocast, backward, ``clip_grad_norm_``, fused AdamW (its decay groups as bertcore's) and the warmup/decay
    schedule. It reads the loss back (``float``) as ``bench.training.HFStep`` does, which the first GPU baseline ran."""

    def __init__(self, model, tc, device: torch.device, precision: str):
        from bertcore.training.optim import lr_schedule

        self.model, self.tc, self.device, self.precision = model.to(device).train(), tc, device, precision
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            (no_decay if p.ndim < 2 or "LayerNorm" in name or name.endswith("bias") else decay).append(p)
        self.params = decay + no_decay
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                                      {"params": no_decay, "weight_decay": 0.0}], lr=tc.lr, fused=True)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_schedule(tc.warmup_steps, tc.steps))

    def __call__(self, b: dict) -> float:
        b = {k: v.to(self.device, non_blocking=True) for k, v in b.items()}
        with autocast(self.device, self.precision):
            out = self.model(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                             attention_mask=b["attention_mask"], labels=b["mlm_labels"],
                             next_sentence_label=b["nsp_labels"])
        self.opt.zero_grad(set_to_none=True)
        out.loss.float().backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.tc.grad_clip, foreach=True)
        self.opt.step()
        self.sched.step()
        return float(out.loss.detach())


def useful_flops(cfg, B: int, T: int, n_sel: float) -> tuple[float, str]:
    """(training FLOPs of one step, who counted them): the matmuls every BERT needs for this batch (the encoder on
    B x T tokens, the MLM head on the masked positions only, NSP; backward = 2 x forward), the same count for both
    sides (bench.training's FLOPS_FORMULA has the same terms)."""
    return train_flops_per_step(cfg, B, T, n_sel / (B * T)), "bertcore.training.flops.train_flops_per_step"


def _allocated(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def _start_peak(device: torch.device) -> int:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return _allocated(device)


def _peak_mib(device: torch.device, before: int):
    if device.type != "cuda":
        return None  # torch counts no peak on the CPU
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def measure_shape(name: str, shape: tuple, precision: str, device: torch.device, corpus, make_runtime, quick: bool,
                  batches=None) -> dict:
    """One row of the table: both sides built, warmed up, then timed in alternating blocks of equal steps."""
    from bertcore.training.trainer import Trainer

    V, D, L, H, F, T, B = shape
    cfg, tc = shape_configs(shape)
    tok, batches = batches if batches is not None else fixed_batches(shape, corpus, device)
    warm = 2 if quick else 5
    before = _start_peak(device)
    tr = Trainer(cfg, tc, data=FixedBatches(tok, batches), runtime=make_runtime(str(device), precision))
    for _ in range(warm):
        tr.step()
    sync(device)
    mem = {"bertcore": _peak_mib(device, before)}
    before = _start_peak(device)
    hf = HFTrainStep(hf_model(cfg), tc, device, precision)
    hf_i = iter(range(1 << 62))

    def hf_step():
        hf(batches[next(hf_i) % len(batches)])

    for _ in range(warm):
        hf_step()
    sync(device)
    mem["transformers"] = _peak_mib(device, before)
    runners = {"bertcore": tr.step, "transformers": hf_step}
    rate = {}
    for k, f in runners.items():  # a first rate, to size the blocks
        t0 = time.perf_counter()
        for _ in range(2):
            f()
        sync(device)
        rate[k] = 2 / (time.perf_counter() - t0)
    block_s, rounds = (0.25, 2) if quick else (1.0, 4)
    per_block = int(min(25, max(3, round(block_s * min(rate.values())))))
    steps = {k: 0 for k in runners}
    secs = {k: 0.0 for k in runners}
    ratios = []
    for r in range(rounds):
        order = list(runners) if r % 2 == 0 else list(runners)[::-1]
        this = {}
        for k in order:
            sync(device)
            t0 = time.perf_counter()
            for _ in range(per_block):
                runners[k]()
            sync(device)
            dt = time.perf_counter() - t0
            steps[k] += per_block
            secs[k] += dt
            this[k] = per_block / dt
        ratios.append(this["bertcore"] / this["transformers"])
    if tr.error:
        raise RuntimeError(f"bertcore's training stopped: {tr.error}")
    sps = {k: steps[k] / secs[k] for k in runners}
    n_sel = statistics.mean(float((b["mlm_labels"] != -100).sum()) for b in batches)
    useful, counter = useful_flops(cfg, B, T, n_sel)
    row = {"shape": name, "precision": precision, "vocab": V, "hidden": D, "layers": L, "heads": H, "ffn": F,
           "seq": T, "batch": B, "masked_per_batch": n_sel, "steps_per_block": per_block, "steps": steps,
           "bertcore_steps_s": sps["bertcore"], "hf_steps_s": sps["transformers"],
           "ratio": sps["bertcore"] / sps["transformers"], "ratio_per_round": ratios,
           "useful_tflop_per_step": useful / 1e12, "flops_counter": counter,
           "bertcore_peak_mib": mem["bertcore"], "hf_peak_mib": mem["transformers"]}
    for k, short in (("bertcore", "bertcore"), ("transformers", "hf")):
        row[f"{short}_useful_tflops"] = useful * sps[k] / 1e12
    tr = hf = runners = None  # noqa: F841 - dropped before the next shape is built
    free(device)
    return row


def add_peak_shares(row: dict, peaks: dict) -> None:
    """The row's useful TFLOP/s as shares of the bf16 matmul peak and of its own precision's matmul peak."""
    for short in ("bertcore", "hf"):
        v = row[f"{short}_useful_tflops"]
        row[f"{short}_bf16_peak_frac"] = v / peaks["bf16"] if peaks.get("bf16") else None
        own = peaks.get(row["precision"])
        row[f"{short}_own_peak_frac"] = v / own if own else None
