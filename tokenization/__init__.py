"""Byte-pair encoding for the Transformer: one vocabulary shared by source and target, on `tokenizers`.

    from tokenization import train_bpe_tokenizer
    tokenizer = train_bpe_tokenizer(files=["train.en", "train.de"], vocab_size=37000)
    tokenizer.save_pretrained("tokenizer/")   # loads anywhere with AutoTokenizer.from_pretrained("tokenizer/")

Command line: `python -m tokenization train --files train.en train.de --vocab_size 37000 --output_dir tokenizer/`.
"""

# One loader for every tokenizer folder (checked: present, readable, a real tokenizer), the model folders' own.
from vaswani.model_folder import load_tokenizer

from .bpe import (
    BYTE_FALLBACK_TOKENS,
    SPECIAL_TOKEN_LAYOUTS,
    UNICODE_NORMALIZERS,
    PortableTokenizerFast,
    build_bpe_pipeline,
    train_bpe_tokenizer,
)
from .errors import TokenizerError, TokenizerTrainingError

__all__ = [
    "BYTE_FALLBACK_TOKENS",
    "SPECIAL_TOKEN_LAYOUTS",
    "UNICODE_NORMALIZERS",
    "PortableTokenizerFast",
    "TokenizerError",
    "TokenizerTrainingError",
    "build_bpe_pipeline",
    "load_tokenizer",
    "train_bpe_tokenizer",
]
