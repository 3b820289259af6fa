"""The one documented error family for bad user input.

Every message says what went wrong *and* what to do about it. The CLI prints
``error: <message>`` and exits 2; the app shows the message in an ``st.error`` box.
All subclasses are ``ValueError`` so callers that only know the builtin still catch them.
"""


class BertcoreError(ValueError):
    """Bad input to bertcore: the message names the problem and the fix."""


class ConfigError(BertcoreError):
    """An invalid model or training configuration (names the field and the fix)."""


class CorpusError(BertcoreError):
    """A corpus that cannot be used (empty, binary, not UTF-8, too large, malformed line)."""


class TokenizerError(BertcoreError):
    """A tokenizer that cannot be built or loaded."""


class CheckpointError(BertcoreError):
    """A checkpoint directory or archive that is missing files or does not match its config."""


class InputError(BertcoreError):
    """Text given to inference that cannot be processed as asked (no [MASK], empty, no head)."""
