"""What a checkpoint predicts: ``fill-mask`` (BERT §3.1), ``nsp`` (P(IsNext), §3.2), ``inspect`` (tokens,
segment ids, attention), and ``mask`` (the masking rates measured on a corpus)."""
from __future__ import annotations

import json
import sys

from bertcore.cli.common import CliError, load_bundle, overrides_dict


def cmd_fill_mask(args) -> int:
    from bertcore.analysis.inference import fill_mask

    b = load_bundle(args.dir)
    r = fill_mask(b.model, b.tokenizer, args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps({"tokens": r.tokens, "masks": [
            {"position": m.position, "candidates": [{"token": t, "prob": p} for t, p in m.candidates]}
            for m in r.masks]}))
        return 0
    if r.truncated:
        print("note: the text was truncated to the model's maximum length", file=sys.stderr)
    print(" ".join(r.tokens))
    for m in r.masks:
        print(f"[MASK] at position {m.position}:")
        for t, p in m.candidates:
            print(f"  {t:<20} {p:.4f}")
    return 0


def cmd_nsp(args) -> int:
    from bertcore.analysis.inference import nsp_probability

    b = load_bundle(args.dir)
    p = nsp_probability(b.model, b.tokenizer, args.a, args.b)
    print(json.dumps({"is_next": p}) if args.json else f"P(IsNext) = {p:.4f}")
    return 0


def cmd_inspect(args) -> int:
    from bertcore.analysis.inference import inspect_pair

    b = load_bundle(args.dir)
    r = inspect_pair(b.model, b.tokenizer, args.a, args.b)
    if args.json:
        print(json.dumps({"tokens": r.tokens, "segment_ids": list(r.segment_ids),
                          "embedded_segment_ids": list(r.embedded_segment_ids), "attentions": r.attentions.tolist()}))
        return 0
    if r.truncated:
        print("note: the input was truncated to the model's maximum length", file=sys.stderr)
    print("tokens:     " + " ".join(r.tokens))
    if r.embedded_segment_ids:  # the rows the model embeds, which differ from the API's 0/1 for a 1/2 model
        conv = "1 = A, 2 = B, 0 = padding" if b.model.config.segment_ids == "1/2" else "0 = A, 1 = B"
        print("segment ids:" + " ".join(str(s) for s in r.embedded_segment_ids) + f"   (embedded rows: {conv})")
    else:
        print("segment ids: none (the model has no segment embedding)")
    L, H, T, _ = r.attentions.shape
    print(f"attentions: {L} layers x {H} heads x {T} x {T}; most-attended token per head (from [CLS]):")
    for layer in range(L):
        row = [r.tokens[int(r.attentions[layer, h, 0].argmax())] for h in range(H)]
        print(f"  layer {layer}: " + "  ".join(row))
    return 0


def cmd_mask(args) -> int:
    from bertcore.config import TrainConfig, split_overrides
    from bertcore.data.corpora import get_corpus
    from bertcore.data.masking_units import geometric_pmf
    from bertcore.data.pretraining import MaskingRates, PretrainingData, masking_stats
    from bertcore.data.tokenization import WordTokenizer

    bert_kw, train_kw = split_overrides(overrides_dict(args.overrides))
    if bert_kw:
        raise CliError(f"mask only takes training settings; {', '.join(bert_kw)} belong to the model config")
    tc = TrainConfig(**train_kw)
    corpus = get_corpus(args.corpus)
    tok = WordTokenizer.build(corpus.texts())
    data = PretrainingData(corpus, tok, tc.max_seq_len, MaskingRates.from_train_config(tc), tc.nsp_positive_prob,
                           tc.held_out_frac, args.seed, sentence_task=tc.sentence_task)
    s = masking_stats(data, args.draws, args.seed)
    keys = ("draws", "tokens_seen", "selected_rate", "mask_share", "random_share", "keep_share")
    out = {k: (int(s[k]) if k in ("draws", "tokens_seen") else float(s[k])) for k in keys}
    if tc.masking_unit != "token":  # the token rule's output keeps its keys
        out["masking_unit"] = tc.masking_unit
    if "span_lengths" in s:  # SpanBERT §3.1: the drawn lengths against the truncated geometric they are drawn from
        expected = geometric_pmf(tc.span_p, tc.span_max_length)
        out.update(span_mean_drawn=float(s["span_mean_drawn"]), span_mean_realised=float(s["span_mean_realised"]),
                   span_lengths=[float(x) for x in s["span_lengths"]], span_expected=[float(x) for x in expected],
                   span_expected_mean=float(sum((k + 1) * p for k, p in enumerate(expected))))
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{out['draws']} examples, {out['tokens_seen']} non-special tokens, masking unit {tc.masking_unit}")
    print(f"selected {out['selected_rate']:.4f} (configured {tc.mlm_probability}); of the selected: "
          f"[MASK] {out['mask_share']:.4f} ({tc.mask_token_frac}), random {out['random_share']:.4f} "
          f"({tc.random_token_frac}), kept {out['keep_share']:.4f} ({tc.keep_frac:.2f})")
    if tc.masking_unit == "whole_word":
        print("note: the mask command builds a word-level vocabulary, where every word is one token, so whole_word "
              "selects as token does")
    if "span_lengths" in out:
        print(f"span lengths in words (p = {tc.span_p:g}, at most {tc.span_max_length}): mean drawn "
              f"{out['span_mean_drawn']:.3f} (geometric {out['span_expected_mean']:.3f}), mean realised "
              f"{out['span_mean_realised']:.3f} (cut at sentence ends and the budget)")
        print("  length  drawn   geometric")
        for k, (got, want) in enumerate(zip(out["span_lengths"], out["span_expected"]), start=1):
            print(f"  {k:>6}  {got:.4f}  {want:.4f}")
    return 0
