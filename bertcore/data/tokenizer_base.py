"""What every tokenizer shares: the special-token roles, id conversion, the encode cache and vocab.txt files.

BERT's inputs need five special tokens (Devlin et al. 2019, §3 "Input/Output Representations"): padding, the
unknown word, the first token whose state feeds NSP (§3.2), the separator and the MLM mask (§3.1). The project's
vocabularies spell them ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (``SPECIAL_TOKENS``, in that role order); a tokenizer
may spell them its own way (BERT-pytorch: ``<pad> <unk> <sos> <eos> <mask>``) and says so to ``_init_specials``.
The data pipeline only ever uses the ids (``pad_id``, ``cls_id``, ``sep_id``, ``mask_id``, ``special_ids``).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from bertcore.errors import TokenizerError
from bertcore.message import Message

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # role order: pad, unk, cls, sep, mask
CACHE_LIMIT = 200_000
CACHE_MAX_CHARS = 1_000  # only sentence-sized texts are memoized (bounds the caches' memory: 200k x 1 KB)


class TokenizerBase:
    """The interface shared by every tokenizer kind (``kind``, ``vocab``, ``token_to_id``, the role ids)."""

    kind = "base"
    vocab: list[str]
    token_to_id: dict[str, int]

    def _init_specials(self, role_tokens: Iterable[str] = SPECIAL_TOKENS) -> None:
        """Look up the ids of the five roles, given as this vocabulary spells them (pad, unk, cls, sep, mask)."""
        role_tokens = list(role_tokens)
        missing = [t for t in role_tokens if t not in self.token_to_id]
        if missing:
            raise TokenizerError(Message(
                "vocabulary lacks special token(s) {missing}; add them (BERT vocabularies start with "
                "{specials})", missing=missing, specials=", ".join(role_tokens)))
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (self.token_to_id[t] for t in role_tokens)
        self.special_ids = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def unk_token(self) -> str:
        return self.vocab[self.unk_id]

    @property
    def mask_token(self) -> str:
        return self.vocab[self.mask_id]

    @property
    def cls_token(self) -> str:
        return self.vocab[self.cls_id]

    @property
    def sep_token(self) -> str:
        return self.vocab[self.sep_id]

    @property
    def pad_token(self) -> str:
        return self.vocab[self.pad_id]

    def pair_template(self, a: str = "A", b: str | None = "B") -> str:
        """The input layout in this vocabulary's spelling (BERT §3, Fig. 2): ``[CLS] A [SEP] B [SEP]``, or
        ``<sos> A <eos> B <eos>`` for BERT-pytorch's vocabulary; ``b=None`` gives the single-sentence form."""
        cls, sep = self.cls_token, self.sep_token
        return f"{cls} {a} {sep}" + (f" {b} {sep}" if b is not None else "")

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        get = self.token_to_id.get
        return [get(t, self.unk_id) for t in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        n = len(self.vocab)
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise TokenizerError(Message("token id {id} is outside the vocabulary (size {n}); use ids in "
                                             "[0, {last}]", id=i, n=n, last=n - 1))
            out.append(self.vocab[i])
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without [CLS]/[SEP] (cached per text; called per training example)."""
        ids = self._cache.get(text)
        if ids is None:
            ids = self._encode(text)
            if len(self._cache) < CACHE_LIMIT and len(text) <= CACHE_MAX_CHARS:
                self._cache[text] = ids
        return list(ids)

    def _encode(self, text: str) -> list[int]:
        return self.convert_tokens_to_ids(self.tokenize(text))

    def tokenize(self, text: str) -> list[str]:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def _write_vocab(self, d: Path) -> None:
        d.mkdir(parents=True, exist_ok=True)
        (d / "vocab.txt").write_text("".join(t + "\n" for t in self.vocab), encoding="utf-8")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


def read_vocab_file(path: str | Path) -> list[str]:
    """The tokens of a vocab.txt (one per line, line number = id); TokenizerError when missing, empty or repeated."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TokenizerError(Message("vocab file {path} not found; pass the path of a vocab.txt (one token per "
                                     "line)", path=p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise TokenizerError(Message("cannot read vocab file {path}: {err}; it must be a UTF-8 text file", path=p,
                                     err=str(e))) from None
    vocab = text.split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    vocab = [t.rstrip("\r") for t in vocab]
    if not vocab:
        raise TokenizerError(Message("vocab file {path} is empty; it needs one token per line, starting with "
                                     "{specials}", path=p, specials=SPECIAL_TOKENS))
    dup = [t for t, c in Counter(vocab).items() if c > 1]
    if dup:
        raise TokenizerError(Message("vocab file {path} repeats token(s) {dup}; each token must appear on one line "
                                     "only", path=p, dup=dup[:5]))
    return vocab
