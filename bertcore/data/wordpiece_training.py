"""WordPiece vocabulary training that gives the same vocabulary every time on the same text.

BERT's WordPiece (Devlin et al. 2019, §3 "Input/Output Representations", after Wu et al. 2016) is learned
here with ``tokenizers``' ``WordPieceTrainer``: start from the characters, then merge the most frequent
adjacent pair until the vocabulary is full. Left alone, that trainer is not reproducible
(huggingface/tokenizers#1794): it numbers the continuation pieces ``##x`` in the iteration order of a hash
map whose keys are randomised per process, and when two pairs are equally frequent it picks the one with the
smaller ids. So the same text gave a different vocabulary (and a different model from the same seed) from
run to run.

Two passes make the numbering fixed:

1. a pass with a vocabulary too small for any merge only collects the alphabet and the ``##x`` pieces the
   text needs (every character that occurs inside a word after its first character);
2. the real training gets those pieces, sorted, right after the five special tokens, so every id and with
   it every tie between equal counts is decided by the text alone.

The vocabulary then is laid out as before: specials, the alphabet, the ``##x`` pieces, the merges in the
order they were made.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

from tokenizers import trainers

from bertcore.data.tokenizer_base import SPECIAL_TOKENS

PREFIX = "##"  # BERT's continuation prefix: "##ing" continues a word


def _non_blank(texts: Iterable[str], seen: list[bool]) -> Iterator[str]:
    for t in texts:
        if t.strip():
            seen[0] = True
            yield t


def train_vocab(new_tokenizer: Callable, texts: Callable[[], Iterable[str]], vocab_size: int,
                min_frequency: int) -> dict[str, int] | None:
    """Token → id of a WordPiece vocabulary of at most ``vocab_size`` tokens (more when the text has more
    distinct characters: every character is kept). ``texts()`` is called twice and must give the same texts
    both times (a list, or a generator over files that can be read again). ``None`` when all text is blank.

    ``new_tokenizer()`` gives an empty ``tokenizers.Tokenizer`` with BERT's normaliser and pre-tokeniser."""
    seen = [False]
    tk = new_tokenizer()
    tk.train_from_iterator(_non_blank(texts(), seen), trainer=trainers.WordPieceTrainer(
        vocab_size=0, special_tokens=list(SPECIAL_TOKENS), continuing_subword_prefix=PREFIX, show_progress=False))
    if not seen[0]:
        return None
    pieces = sorted(t for t in tk.get_vocab(with_added_tokens=False) if t.startswith(PREFIX))

    tk = new_tokenizer()
    tk.train_from_iterator(_non_blank(texts(), [False]), trainer=trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS) + pieces,
        continuing_subword_prefix=PREFIX, show_progress=False))
    trained = tk.get_vocab(with_added_tokens=False)
    by_id = sorted(trained, key=trained.get)
    fixed = set(SPECIAL_TOKENS) | set(pieces)
    alphabet = [t for t in by_id if len(t) == 1 and t not in fixed]  # a merge always makes 2+ characters
    merges = [t for t in by_id if len(t) > 1 and t not in fixed]
    return {t: i for i, t in enumerate(list(SPECIAL_TOKENS) + alphabet + pieces + merges)}
