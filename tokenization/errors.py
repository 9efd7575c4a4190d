"""Exceptions raised for user mistakes; the command line prints their message without a traceback."""

from vaswani.errors import UserError


class TokenizerError(UserError):
    """A tokenizer could not be built or loaded because of its input; the message names the problem and the fix."""


class TokenizerTrainingError(TokenizerError):
    """Training a tokenizer failed because of its arguments or its corpus (empty, missing file, vocabulary too small)."""
