"""Conversion (`vaswani convert`): pretrained Marian (OPUS-MT) and fairseq Transformers as Vaswani model folders.

    from vaswani.convert import convert_fairseq, convert_marian

    convert_marian("opus-mt-en-es", "opus-mt-en-es-vaswani")   # a local MarianMTModel folder -> a vaswani folder
    convert_fairseq("wmt16.en-de/model.pt", "wmt16.en-de", "en-de")   # a fairseq checkpoint + dict.LANG.txt

`marian.py` maps a `MarianMTModel`, `fairseq.py` fairseq's `TransformerModel` (with the layer mapping of marian.py);
docs/pretrained.md has both tables.
"""

from vaswani.convert.fairseq import convert_fairseq
from vaswani.convert.marian import convert_marian

CONVERTERS = {"marian": convert_marian, "fairseq": convert_fairseq}  # `vaswani convert --from NAME`

__all__ = ["CONVERTERS", "convert_fairseq", "convert_marian"]
