"""A study's table: each metric as mean ± sd over seeds, and where a variant differs from the reference.

A difference is marked only when a **paired t-test over seeds** (two-sided, p < 0.05; scipy's ``ttest_rel``) finds
it: the runs of one seed share their initial weights and data order, so the seed is the pair. With fewer than three
seeds in common nothing is marked (the test cannot tell a difference from the seeds' spread). The CSV holds one row
per variant; ``curves_svg`` draws a held-out curve of every variant (mean over seeds) as a plain SVG file.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pandas as pd
from scipy import stats

from bertcore.lab.studies import METRICS, Study
from bertcore.message import Message

ALPHA = 0.05
MIN_PAIRS = 3
TEST = Message("paired t-test over seeds (two-sided, p < 0.05)")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof = 1; None with a single value)."""
    xs = [float(v) for v in values if _finite(v)]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def paired_test(ref: dict[int, float], other: dict[int, float]) -> dict:
    """{diff: mean(other - ref), p, n, marked} over the seeds both have (``TEST``)."""
    seeds = sorted(s for s in ref if s in other and _finite(ref[s]) and _finite(other[s]))
    n = len(seeds)
    if not n:
        return {"diff": None, "p": None, "n": 0, "marked": False}
    d = [other[s] - ref[s] for s in seeds]
    diff = sum(d) / n
    p = None
    if n >= MIN_PAIRS:
        if all(abs(x - d[0]) < 1e-12 for x in d):  # no spread at all: the test is undefined
            p = 0.0 if abs(diff) > 1e-12 else 1.0
        else:
            p = float(stats.ttest_rel([other[s] for s in seeds], [ref[s] for s in seeds]).pvalue)
    return {"diff": diff, "p": p, "n": n, "marked": p is not None and p < ALPHA and abs(diff) > 1e-12}


def summarise(study: Study, variants: list[dict]) -> list[dict]:
    """Add ``mean``, ``sd`` and ``tests`` (against the reference) to each variant dict ({name, settings, runs:
    [{seed, dir, status, metrics}]})."""
    by_name = {v["name"]: v for v in variants}
    ref = by_name.get(study.reference)

    def per_seed(v: dict, k: str) -> dict[int, float]:
        return {int(r["seed"]): r["metrics"][k] for r in v["runs"] if _finite((r.get("metrics") or {}).get(k))}

    for v in variants:
        v["mean"], v["sd"], v["tests"] = {}, {}, {}
        for k in study.columns:
            vals = list(per_seed(v, k).values())
            v["mean"][k], v["sd"][k] = mean_sd(vals)
            if ref is not None and v is not ref:
                v["tests"][k] = paired_test(per_seed(ref, k), per_seed(v, k))
    return variants


def used_metrics(variants: list[dict]) -> list[str]:
    """The metrics some variant has a value for (a study of bidirectional models has no next-token column)."""
    return [k for k in METRICS if any(v["mean"].get(k) is not None for v in variants)]


def cell(v: dict, k: str) -> str:
    """"0.912 ± 0.004 ▲" (mean ± sd, the mark when the paired test finds a difference); "n/a" without values."""
    m, sd = v["mean"].get(k), v["sd"].get(k)
    if m is None:
        return "n/a"
    text = f"{m:.3f}" + (f" ± {sd:.3f}" if sd is not None else "")
    t = v.get("tests", {}).get(k)
    if t and t["marked"]:
        text += " ▲" if t["diff"] > 0 else " ▼"
    return text


def text_table(data: dict, study: Study) -> str:
    """The table as aligned plain text (the CLI's output)."""
    variants = data["variants"]
    cols = used_metrics(variants)
    head = ["variant", "seeds"] + [METRICS[k][0] for k in cols] + list(study.paper_columns)
    rows = [head]
    for v in variants:
        done = sum(1 for r in v["runs"] if r.get("metrics"))
        rows.append([v["name"], str(done)] + [cell(v, k) for k in cols]
                    + [f"{v.get('paper', {}).get(c, ''):}" for c in study.paper_columns])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"ours: mean ± sd over seeds; ▲/▼: differs from {study.reference!r} by a {TEST}."]
    if study.paper_columns:
        notes.append(f"paper ({study.source}): {study.paper_note}")
    return "\n".join(lines + [""] + notes)


def to_csv(data: dict, study: Study) -> str:
    """One row per variant: the seeds scored, mean and sd of every metric, the test against the reference (p and
    whether it is marked), and the paper's columns."""
    variants = data["variants"]
    cols = used_metrics(variants)
    buf = io.StringIO()
    w = csv.writer(buf)
    head = ["variant", "seeds"]
    for k in cols:
        head += [f"{k}_mean", f"{k}_sd", f"{k}_diff", f"{k}_p", f"{k}_marked"]
    head += [f"paper {c}" for c in study.paper_columns]
    w.writerow(head)
    for v in variants:
        row = [v["name"], sum(1 for r in v["runs"] if r.get("metrics"))]
        for k in cols:
            t = v.get("tests", {}).get(k) or {}
            row += [_num(v["mean"].get(k)), _num(v["sd"].get(k)), _num(t.get("diff")), _num(t.get("p")),
                    "" if not t else str(bool(t.get("marked"))).lower()]
        row += [v.get("paper", {}).get(c, "") for c in study.paper_columns]
        w.writerow(row)
    return buf.getvalue()


def _num(x) -> str:
    return "" if x is None else f"{x:.6g}"


def mean_curves(data: dict, column: str) -> dict[str, list[tuple[int, float]]]:
    """{variant: [(step, mean over seeds of ``column``)]}: the held-out curve in each run's history.csv, at the
    steps every finished seed evaluated."""
    out = {}
    for v in data["variants"]:
        frames = []
        for r in v["runs"]:
            p = Path(r["dir"]) / "history.csv"
            if r.get("metrics") and p.is_file():
                f = pd.read_csv(p)
                if column in f:
                    frames.append(f.dropna(subset=[column]).set_index("step")[column])
        if frames:
            joined = pd.concat(frames, axis=1).dropna()
            out[v["name"]] = [(int(s), float(x)) for s, x in joined.mean(axis=1).items()]
    return out


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#393b79", "#637939")


def curves_svg(curves: dict[str, list[tuple[int, float]]], title: str, y_label: str) -> str:
    """A line chart of ``curves`` as a self-contained SVG (no fonts or scripts fetched)."""
    W, H, L, R, T, B = 720, 420, 60, 180, 40, 50
    pts = [p for c in curves.values() for p in c]
    x_max = max((s for s, _ in pts), default=1) or 1
    y_lo = min((y for _, y in pts), default=0.0)
    y_hi = max((y for _, y in pts), default=1.0)
    y_lo, y_hi = min(0.0, y_lo), max(1.0, y_hi)

    def X(s):
        return L + (W - L - R) * s / x_max

    def Y(y):
        return T + (H - T - B) * (1 - (y - y_lo) / ((y_hi - y_lo) or 1))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="24" font-size="15">{_esc(title)}</text>']
    for k in range(6):
        yv = y_lo + (y_hi - y_lo) * k / 5
        out.append(f'<line x1="{L}" y1="{Y(yv):.1f}" x2="{W - R}" y2="{Y(yv):.1f}" stroke="#ddd"/>'
                   f'<text x="{L - 6}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.2f}</text>')
    for k in range(6):
        xv = x_max * k / 5
        out.append(f'<text x="{X(xv):.1f}" y="{H - B + 18}" text-anchor="middle">{xv:.0f}</text>')
    out.append(f'<text x="{(L + W - R) / 2:.0f}" y="{H - 12}" text-anchor="middle">step</text>'
               f'<text x="16" y="{(T + H - B) / 2:.0f}" transform="rotate(-90 16 {(T + H - B) / 2:.0f})" '
               f'text-anchor="middle">{_esc(y_label)}</text>')
    for i, (name, c) in enumerate(curves.items()):
        col = _COLOURS[i % len(_COLOURS)]
        path = " ".join(f"{X(s):.1f},{Y(y):.1f}" for s, y in c)
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{path}"/>')
        out.append(f'<line x1="{W - R + 12}" y1="{T + 16 * i + 6}" x2="{W - R + 32}" y2="{T + 16 * i + 6}" '
                   f'stroke="{col}" stroke-width="2"/><text x="{W - R + 38}" y="{T + 16 * i + 10}">{_esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _esc(s: str) -> str:
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
