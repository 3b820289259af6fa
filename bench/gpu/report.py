"""What ``python -m bench.gpu`` prints: its tables (Markdown, as docs/BENCH.md keeps them) and the GPU targets
("Done when", on one H100) checked against the numbers a run has."""
from __future__ import annotations

import math
import statistics

SECTIONS = ("peak", "steps", "loop", "app", "determinism")


def _f(x, fmt=".2f"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def render_step_row(c: dict) -> str:
    if "error" in c or "skipped" in c:
        return f"| {c['shape']} | {c['precision']} | {c.get('error') or c.get('skipped')} |"
    shape = f"{c['shape']} ({c['vocab']}, {c['hidden']}, {c['layers']}, {c['heads']}, {c['ffn']}, {c['seq']}, {c['batch']})"

    def pct(v):
        return f"{100 * v:.0f}%" if v is not None else "-"

    return (f"| {shape} | {c['precision']} | {c['bertcore_steps_s']:.2f} | {c['hf_steps_s']:.2f} | "
            f"**{c['ratio']:.2f}x** | {c['useful_tflop_per_step']:.3g} | {c['bertcore_useful_tflops']:.3g} "
            f"({pct(c.get('bertcore_bf16_peak_frac'))}) | {c['hf_useful_tflops']:.3g} ({pct(c.get('hf_bf16_peak_frac'))}) "
            f"| {_f(c['bertcore_peak_mib'], '.0f')} / {_f(c['hf_peak_mib'], '.0f')} |")


STEP_HEADER = ("| shape (vocab, hidden, layers, heads, ffn, seq, batch) | precision | bertcore steps/s | transformers "
               "steps/s | ratio | useful TFLOP/step | bertcore TFLOP/s (% bf16 peak) | transformers TFLOP/s (% bf16 "
               "peak) | peak MiB bertcore / transformers |\n|---|---|---|---|---|---|---|---|---|")


def render_determinism(pair: str, d: dict) -> str:
    if "identical" not in d:
        return f"determinism, {pair}: {d.get('skipped') or d.get('error')}"
    return (f"determinism, {pair}: two runs {'identical' if d['identical'] else 'DIFFER'} (max |diff| "
            f"{d['max_abs_diff']:.3g}; final MLM loss {d['final_mlm_loss'][0]:.4f} vs {d['final_mlm_loss'][1]:.4f}; "
            f"{statistics.mean(d['steps_s']):.1f} steps/s)")


def targets(r: dict) -> list[dict]:
    """The GPU targets (docs/BENCH.md) on one H100, for the numbers this run has."""
    t = []
    rows = [c for c in r.get("steps", {}).get("rows", []) if "ratio" in c]
    for c in rows:
        need = 2.0 if c["precision"] == "bf16" else 1.5
        t.append({"target": f"{c['shape']} {c['precision']}: bertcore >= {need}x transformers", "value": round(c["ratio"], 2),
                  "met": c["ratio"] >= need})
        if c["shape"] == "base" and c["precision"] == "bf16" and c.get("bertcore_bf16_peak_frac") is not None:
            v = c["bertcore_bf16_peak_frac"]
            t.append({"target": "base bf16: >= 40% of the bf16 matmul peak", "value": round(v, 3), "met": v >= 0.4})
    app = r.get("app", {})
    if "wall_s" in app:
        t.append({"target": f"default app run ({app['steps']} steps) <= 10 s wall", "value": round(app["wall_s"], 1),
                  "met": app["wall_s"] <= 10})
    for c in r.get("loop", {}).get("rows", []):
        if "ratio" in c:
            t.append({"target": f"{c['shape']}: train --data >= 90% of Trainer.step", "value": round(c["ratio"], 2),
                      "met": c["ratio"] >= 0.9})
    det = r.get("determinism", {}).get("deterministic", {})
    if "identical" in det:
        t.append({"target": "two deterministic runs identical", "value": det["identical"], "met": det["identical"]})
    return t


def render(r: dict) -> str:
    m = r["machine"]
    where = m.get("gpu") or f"CPU ({m['cpu_cores']} cores)"
    lines = [f"machine: {where}, torch {m['torch']} (CUDA {m['cuda'] or '-'}), transformers {m['transformers']}, "
             f"fp32 matmul precision {m['float32_matmul_precision']}; {r['command']}"]
    pk = r.get("peak", {})
    if "bf16" in pk:
        lines.append(f"matmul peak: bf16 {pk['bf16']['n']}^3 {pk['bf16']['tflops']:.4g} TFLOP/s, fp32 "
                     f"{pk['fp32']['tflops']:.4g} TFLOP/s")
    st = r.get("steps", {})
    if "rows" in st:
        lines += ["", STEP_HEADER] + [render_step_row(c) for c in st["rows"]]
    lp = r.get("loop", {})
    if "rows" in lp:
        lines += ["", "| loop: shape | precision | train --data steps/s | Trainer.step steps/s | loop / step | tokens/s |",
                  "|---|---|---|---|---|---|"]
        for c in lp["rows"]:
            lines.append(f"| {c['shape']} | {c.get('precision', '-')} | {_f(c.get('loop_steps_s'))} | "
                         f"{_f(c.get('step_steps_s'))} | {_f(c.get('ratio'))} | {_f(c.get('loop_tokens_s'), ',.0f')} |"
                         if "ratio" in c else f"| {c['shape']} | {c.get('error') or c.get('skipped')} |")
    app = r.get("app", {})
    if "wall_s" in app:
        lines += ["", f"default app run: {app['steps']} steps on {app['trained_on']} (asked {app['asked_runtime']}) in "
                  f"{app['wall_s']:.1f} s wall, {app['train_seconds']:.1f} s in steps; {app['evaluations']} evaluations; "
                  f"held-out MLM accuracy {_f(app['eval_mlm_acc'], '.3f')} (unigram {app['unigram_baseline']:.3f})"]
    det = r.get("determinism", {})
    lines += [render_determinism(k, det[k]) for k in ("default", "deterministic") if isinstance(det.get(k), dict)]
    if "deterministic_cost" in det:
        lines.append(f"determinism costs {100 * det['deterministic_cost']:.0f}% of steps/s")
    for s in SECTIONS:
        if isinstance(r.get(s), dict) and "error" in r[s]:
            lines.append(f"section {s} FAILED: {r[s]['error']}")
    lines += ["", "targets (for one H100)" + ("" if m.get("gpu") else "; this run is on a CPU: not a GPU result")
              + ":"] + [f"- [{'x' if t['met'] else ' '}] {t['target']}: {t['value']}" for t in r.get("targets", [])]
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines)
