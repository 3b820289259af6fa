"""The Train page's data form: corpus, tokenizer (with the preset's default vocabulary) and the live probe.

``corpus_choice`` offers the built-in corpus, the tutorial two-liner or this session's upload; ``tokenizer_choice``
builds the vocabulary the preset trains with by default (``bertcore.presets.preset_tokenizer``: BERT-pytorch's
own at paper size, bertcore.data.bert_pytorch_vocab) or the one the user picks; ``probe_inputs`` the three texts the
live probe asks at every evaluation (``bertcore.analysis.live_probe``); ``objective_widgets`` the objective
switches (the sentence task, the attention direction, the masking unit with BERT's mask rate and mix), each with the
paper it comes from; ``runtime_caption`` where it trains; ``checkpoints`` the downloads and the upload. Widget keys start with ``train_``.
"""
from __future__ import annotations

import streamlit as st

from bertcore.analysis.live_probe import Probe, check_probe, default_probe
from bertcore.config import TrainConfig
from bertcore.data.corpus import tutorial_corpus
from bertcore.data.corpus_defaults import CorpusDefaults, corpus_defaults, default_tokenizer
from bertcore.data.masking_units import geometric_pmf
from bertcore.errors import BertcoreError
from bertcore.presets import preset_tokenizer
from explorer.session import corpus_state, state, uploads, workspace
from explorer.i18n import frozen, mark, tr
from explorer.page_errors import error_text, user_action
from explorer.launch.training_slots import training_runtime

BUILTIN_LABEL = mark("built-in grammar")
TUTORIAL_LABEL = mark("tutorial two-liner")
BUILTIN_ZH_LABEL = mark("built-in Chinese (中文)")
UPLOADED_PREFIX = "uploaded: "  # the option of this session's upload: "uploaded: <name>"
TOKENIZER_LABELS = {"word": mark("word-level"), "wordpiece": mark("WordPiece"),
                    "bert_pytorch": mark("BERT-pytorch")}
TOKENIZER_HELP = mark("word-level: [PAD] [UNK] [CLS] [SEP] [MASK], lowercased, punctuation split off (BERT's basic "
                  "tokenizer). WordPiece splits rare words into ##pieces, so real prose has almost no [UNK]. "
                  "BERT-pytorch vocabulary (the tutorials 000/003): <pad> <unk> <eos> <sos> <mask> at ids 0-4, then "
                  "whitespace words, case kept, by frequency; inputs read <sos> A <eos> B <eos>. Type [MASK] or "
                  "<mask> on the other pages either way.")
# The objective switches (TrainConfig.sentence_task, masking_unit; BertConfig.attention_direction): the value as
# stored, its label, and one sentence naming the paper it comes from.
SENTENCE_TASKS = {
    "nsp": (mark("NSP"), mark("BERT §3.2, next sentence prediction: is B the sentence that follows A, or a random "
                              "sentence of the corpus (half of the pairs each)?")),
    "sop": (mark("SOP"), mark("ALBERT §4.6, sentence-order prediction: is the true pair in order, or swapped (B "
                              "before A)? Both orders hold the same two sentences, so the topic gives nothing "
                              "away.")),
    "none": (mark("none"), mark("RoBERTa §4.2: MLM alone. The pair is still packed as A and B, but no sentence head "
                                "trains: the NSP curves stay empty.")),
}
ATTENTIONS = {
    "bidirectional": (mark("bidirectional"), mark("BERT: every token attends to every token, left and right, and "
                                                  "learns by filling in masked words.")),
    "left_to_right": (mark("left-to-right"), mark("BERT Table 5's LTR: a causal mask (each token sees itself and "
                                                  "its left only) and a next-token objective, like OpenAI GPT. The "
                                                  "sentence head reads the last token, because under a causal mask "
                                                  "[CLS] sees only itself and the last token is the one that sees "
                                                  "the whole pair.")),
}
MASKING_UNITS = {
    "token": (mark("token"), mark("BERT §3.1: each token is selected on its own.")),
    "whole_word": (mark("whole word"), mark("BERT's whole-word masking (2019): all pieces of a WordPiece word are "
                                            "selected together.")),
    "span": (mark("span"), mark("SpanBERT §3.1: runs of whole words whose lengths are geometric with p, cut at the "
                                "max length (p 0.2, at most 10: 3.8 words on average).")),
}
WORD_LEVEL_SAME = mark("This vocabulary has one token per word, so whole-word masking is identical to token masking.")
NO_MASKING = mark("**Masking: none.** A left-to-right model masks nothing: every real next token is a target. The mask "
                  "rate, the [MASK]/random/keep mix and the masking unit do not apply.")


def corpus_choice(disabled: bool):
    """(corpus, label) of the chosen corpus: the built-in one, the tutorial two-liner or an upload."""
    options = [BUILTIN_LABEL, TUTORIAL_LABEL, BUILTIN_ZH_LABEL]
    up = corpus_state.uploaded()  # the corpus this session last uploaded on the Data & tokens page
    uploaded = up.corpus if up is not None else None
    if uploaded is not None:
        options.append(f"{UPLOADED_PREFIX}{getattr(uploaded, 'name', 'corpus')}")
    choice = st.radio(tr("Corpus"), options, key="train_corpus", horizontal=True, disabled=disabled,
                      format_func=corpus_label,  # the values stay English: session state and tests use them
                      help=tr("Upload your own corpus on the Data & tokens page; it then appears here."))
    if choice == options[0]:
        return workspace.shared_corpus_and_tokenizer()[0], choice
    if choice == BUILTIN_ZH_LABEL:
        return corpus_state.builtin_zh_choice().corpus, choice
    return (tutorial_corpus() if choice == options[1] else uploaded), choice


def corpus_label(option: str) -> str:
    """A corpus option as shown, in the session's language."""
    if option.startswith(UPLOADED_PREFIX):
        return tr("uploaded: {name}", name=option[len(UPLOADED_PREFIX):])
    return tr(option)


def tokenizer_choice(corpus, choice: str, preset: str, size: str, disabled: bool):
    """(tokenizer, key) for the corpus. The default is the preset's vocabulary (``preset_tokenizer``: the
    tutorial's own for BERT-pytorch at paper size), else word-level, or WordPiece for an upload (size from
    ``suggested_vocab_size``). The built-in corpus shares its word-level tokenizer."""
    uploaded = choice.startswith("uploaded")
    defaults = corpus_defaults(corpus, user_file=uploaded, preset_tokenizer=preset_tokenizer(preset, size), size=size,
                               tokenizer=False)  # kind and vocabulary only; the length is measured below
    default = defaults.tokenizer
    kinds = list(TOKENIZER_LABELS)
    if st.session_state.get("train_tok_default") != default:  # a new preset, size or corpus: offer its default
        st.session_state["train_tok_default"] = st.session_state["train_tok_kind"] = default
    c1, c2 = st.columns(2)
    kind = c1.radio(tr("Tokenizer"), kinds, key="train_tok_kind", horizontal=True,  # the value set just above
                    disabled=disabled, format_func=frozen(lambda k: tr(TOKENIZER_LABELS[k])), help=tr(TOKENIZER_HELP))
    vocab = 0
    if kind == "wordpiece":
        vocab = int(c2.number_input(tr("WordPiece vocabulary size"), 200, 30000, defaults.vocab_size or 1000, 100,
                                    key=f"train_vocab_{id(corpus)}", disabled=disabled,
                                    help=tr("Picked from the corpus's distinct words; more costs speed.")))
    used = tr(TOKENIZER_LABELS[preset_tokenizer(preset, size)])
    if kind == default:
        c2.caption(tr("**{preset}** at size **{size}** trains with the **{used}** vocabulary by default.",
                      preset=preset, size=size, used=used))
    else:
        c2.caption(tr("**{preset}** at size **{size}** trains with the **{used}** vocabulary by default; you chose "
                      "**{chosen}**.", preset=preset, size=size, used=used, chosen=tr(TOKENIZER_LABELS[kind])))
    if choice == BUILTIN_LABEL and kind == "word":
        return workspace.shared_corpus_and_tokenizer()[1], f"builtin|{kind}|0"
    cache = st.session_state.setdefault("train_tok_cache", {})
    key = (choice, id(corpus), kind, vocab)
    if key not in cache:
        with st.spinner(tr("Building the vocabulary…")):
            tok = default_tokenizer(corpus, kind, vocab)
        cache.clear()
        cache[key] = tok
    if kind == "wordpiece" and cache[key].vocab_size > vocab:  # say the size the model really gets
        c2.caption(tr("WordPiece keeps every character it has seen, so this vocabulary has **{n}** tokens, not {asked} "
                      "(a Chinese text's vocabulary is its character set).", n=f"{cache[key].vocab_size:,}",
                      asked=f"{vocab:,}"))
    spec = {BUILTIN_LABEL: "builtin", BUILTIN_ZH_LABEL: corpus_state.BUILTIN_ZH}.get(choice, choice)
    return cache[key], spec + f"|{kind}|{vocab}"


def _choice(col, label: str, table: dict, value: str, key: str, disabled: bool) -> str:
    """A radio of one objective switch with the chosen option's sentence under it."""
    options = list(table)
    chosen = col.radio(label, options, options.index(value) if value in options else 0, key=key, disabled=disabled,
                       format_func=frozen(lambda v: tr(table[v][0])))
    col.caption(tr(table[chosen][1]))
    return chosen


def objective_widgets(b: dict, t: dict, k: str, disabled: bool, tokenizer) -> tuple[dict, dict]:
    """The objective switches under the Model and Training columns: the attention direction, the sentence task and
    the masking (unit, SpanBERT's p and max length, BERT's rate and [MASK]/random/keep mix; none for a left-to-right
    model, which masks nothing). ``b``, ``t``: the preset's configs as dicts; ``k``: the widget key prefix (the
    preset's and size's). Returns (BertConfig fields, TrainConfig fields)."""
    st.markdown(tr("**Objective** (`BertConfig.attention_direction`, `TrainConfig.sentence_task`, "
                   "`TrainConfig.masking_unit`)"))
    c1, c2, c3 = st.columns(3)
    direction = _choice(c1, tr("attention"), ATTENTIONS, b["attention_direction"], k + "attn", disabled)
    tk = {"sentence_task": _choice(c2, tr("sentence task"), SENTENCE_TASKS, t["sentence_task"], k + "sent", disabled)}
    keep = ("masking_unit", "span_p", "span_max_length", "mlm_probability", "mask_token_frac", "random_token_frac")
    tk.update({f: t[f] for f in keep})
    if direction == "left_to_right":
        c3.caption(tr(NO_MASKING))
        return {"attention_direction": direction}, tk
    with c3:
        unit = tk["masking_unit"] = _choice(st, tr("masking unit"), MASKING_UNITS, t["masking_unit"], k + "unit",
                                            disabled)
        if unit == "whole_word" and getattr(tokenizer, "kind", "word") != "wordpiece":
            st.caption(tr(WORD_LEVEL_SAME))
        if unit == "span":
            s1, s2 = st.columns(2)
            tk["span_p"] = float(s1.number_input(tr("span p"), 0.05, 1.0, float(t["span_p"]), 0.05, key=k + "sp",
                                                 disabled=disabled, help=tr("P(length = l) ∝ p(1 − p)^(l − 1)")))
            tk["span_max_length"] = int(s2.number_input(tr("max span length (words)"), 1, 64,
                                                        int(t["span_max_length"]), 1, key=k + "sl",
                                                        disabled=disabled))
            pmf = geometric_pmf(tk["span_p"], tk["span_max_length"])
            st.caption(tr("Mean span drawn: {mean} words (`bertcore.data.masking_units.geometric_pmf`).",
                          mean=f"{sum((i + 1) * q for i, q in enumerate(pmf)):.2f}"))
        tk["mlm_probability"] = st.slider(tr("mask rate (share of tokens selected)"), 0.05, 0.5,
                                          float(t["mlm_probability"]), 0.01, key=k + "mr", disabled=disabled)
        m1, m2 = st.columns(2)
        tk["mask_token_frac"] = m1.slider("→ [MASK]", 0.0, 1.0, float(t["mask_token_frac"]), 0.05, key=k + "m80",
                                          disabled=disabled)
        tk["random_token_frac"] = m2.slider(tr("→ random"), 0.0, 1.0, float(t["random_token_frac"]), 0.05,
                                            key=k + "m10", disabled=disabled)
        st.caption(tr("→ kept unchanged: {share} (BERT: 80/10/10)",
                      share=f"{max(0.0, 1 - tk['mask_token_frac'] - tk['random_token_frac']):.2f}"))
    return {"attention_direction": direction}, tk


def chosen_defaults(corpus, tok, ckey: str, preset: str, size: str) -> CorpusDefaults:
    """``bertcore.data.corpus_defaults.corpus_defaults`` for this corpus (the CLI asks the same function), with the
    tokenizer built for it; cached per corpus."""
    cache = st.session_state.setdefault("train_max_len", {})
    key = (ckey, id(corpus), preset, size)
    if key not in cache:
        cache[key] = corpus_defaults(corpus, user_file=ckey.startswith("uploaded"),
                                     preset_tokenizer=preset_tokenizer(preset, size), size=size,
                                     preset_max_seq_len=TrainConfig().max_seq_len, tokenizer=tok)
    return cache[key]


def upload_max_len(corpus, tok, ckey: str, size: str, preset: str | None = None) -> int | None:
    """The max sequence length offered for the corpus (None: the preset's own), from ``chosen_defaults``."""
    return chosen_defaults(corpus, tok, ckey, preset, size).max_seq_len


def probe_inputs(corpus, tok, ckey: str, disabled: bool, max_len: int | None = None):
    """The live probe's three texts (defaults from the corpus); returns (Probe or None, problem or None).
    ``max_len``: the model's max_position_embeddings (the probe's [MASK] must lie within it)."""
    cache = st.session_state.setdefault("train_probe_default", {})
    if ckey not in cache:
        try:
            cache[ckey] = default_probe(corpus, tok)
        except BertcoreError:
            cache[ckey] = Probe("the [MASK] is here .", "a", "b")
    d = cache[ckey]
    k = f"train_probe_{abs(hash(ckey)) % 10**8}_"
    st.markdown(tr("**Live probe** (`bertcore.analysis.live_probe`): asked at every evaluation"))
    c1, c2, c3 = st.columns([2, 2, 2])
    probe = Probe(c1.text_input(tr("sentence with one [MASK]"), d.text, key=k + "text", disabled=disabled),
                  c2.text_input(tr("pair: sentence A"), d.a, key=k + "a", disabled=disabled),
                  c3.text_input(tr("pair: sentence B (P(IsNext)?)"), d.b, key=k + "b", disabled=disabled))
    try:
        unknown = check_probe(probe, tok, max_len)
    except BertcoreError as e:
        return None, tr("the probe: {error}", error=error_text(e))
    if unknown:
        st.caption(tr("Not in the vocabulary (they become [UNK]): {words}", words=", ".join(unknown[:10])))
    return probe, None


def runtime_caption(run=None) -> None:
    """A quiet line saying where the training runs: the running one's device and precision, else where the next
    Start trains (``explorer.launch.training_slots.training_runtime``: the GPU when torch sees one), e.g. "cuda:0, bf16"."""
    if run is not None:
        label = run.runtime.label
    else:
        try:
            label = training_runtime().label
        except BertcoreError as e:  # a bad BERTCORE_TRAINING_DEVICE: Start says it too
            st.caption(error_text(e))
            return
    st.caption(tr("Trains on {runtime}", runtime=label))


def checkpoints(active) -> None:
    """The Checkpoints section: the active model's zip and history.csv to download, and a checkpoint zip to upload
    (``explorer.session.uploads``: extracted safely, safetensors only)."""
    st.subheader(tr("Checkpoints"))
    c1, c2 = st.columns(2)
    with c1:
        st.markdown(tr("Active model: **{model}**", model=active.label))
        if active.kind != "untrained":
            cache = st.session_state.setdefault("train_zip", {})
            if st.button(tr("Prepare checkpoint zip"), key="train_prepare_zip"):
                with user_action(tr("Prepare the checkpoint zip"), tr("Could not save the checkpoint: ")):
                    cache.clear()
                    cache[id(active.bundle)] = uploads.checkpoint_zip_bytes(active.bundle)
            data = cache.get(id(active.bundle))
            if data is not None:
                st.download_button(tr("Download checkpoint (.zip)"), data, file_name="bert-checkpoint.zip",
                                   mime="application/zip", key="train_dl_zip", on_click="ignore")
        hist = getattr(active.bundle, "history", None)
        if hist is not None and len(hist):
            st.download_button(tr("Download history (.csv)"), hist.to_csv(index=False).encode(), file_name="history.csv",
                               mime="text/csv", key="train_dl_csv", on_click="ignore")
        st.caption(tr("The zip holds config.json, model.safetensors, the vocabulary and history.csv "
                      "(`bertcore.io.checkpoint.save_checkpoint`)."))
    with c2:
        up = st.file_uploader(tr("Upload a checkpoint (.zip)"), type=["zip"], key="train_upload")
        if up is not None and st.button(tr("Load uploaded checkpoint"), key="train_load_upload"):
            with user_action(tr("Load the uploaded checkpoint"), tr("Checkpoint rejected: ")):
                bundle = state.load_uploaded_checkpoint(up.getvalue(), up.name)  # on error the current model stays
                state.set_active("uploaded", bundle, f"uploaded: {up.name}")
                st.rerun()
        st.caption(tr("Extracted safely into this session's temp dir: no `..`/absolute paths, at most {mb} MB "
                      "unpacked, and no pickle files (.bin/.pt/.pkl) — weights load only from safetensors "
                      "(`bertcore.io.checkpoint.load_checkpoint`).", mb=uploads.MAX_UPLOAD_UNCOMPRESSED // 2**20))
