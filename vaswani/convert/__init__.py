"""Conversion (`vaswani convert`): pretrained Marian (OPUS-MT) and fairseq Transformers as Vaswani model folders."""
