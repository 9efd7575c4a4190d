"""Tokenizers read without transformers, for translating with a CTranslate2 export in a fraction of the time
(`vaswani.model_folder.load_tokenizer(..., light=True)`): each is the part of transformers' tokenizer that translating
and scoring use, computed as transformers computes it, and loads transformers' own for anything else.

- `LightTokenizer`: a plain fast tokenizer (tokenizer.json, every tokenizer `tokenization/` saves), by `tokenizers`.
- `LightMarianTokenizer`: a converted OPUS-MT model's MarianTokenizer (two sentencepiece models, a joint vocab.json),
  by `sentencepiece`.
- `mend_subword_nmt_decoder`: the decoder of an older `vaswani convert --from fairseq` folder, mended in memory; every
  tokenizer loaded from a folder gets it, light or not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vaswani.constants import TOKENIZER_FILE
from vaswani.fileio import read_json_object


# ----------------------------------------------------------------------------------------------------------------
# The subword-nmt decoder of older fairseq conversions
# ----------------------------------------------------------------------------------------------------------------
def subword_nmt_decoder():
    """The decoder of a subword-nmt vocabulary ("Hel@@ lo" -> "Hello", as fairseq's --remove-bpe): a space after
    every piece, "@@ " removed, the last space cut. The cut is a `Replace` of the final space: tokenizers' `Strip(" ",
    0, 1)`, which `vaswani convert` wrote before, panics on an empty output (nothing but special tokens)."""
    from tokenizers import Regex, decoders

    return decoders.Sequence([decoders.Replace(Regex("$"), " "), decoders.Replace("@@ ", ""), decoders.Fuse(),
                              decoders.Replace(Regex(" \\z"), "")])  # fmt: skip


# the decoder that `subword_nmt_decoder` replaces, as tokenizers writes it
PANICKING_SUBWORD_NMT_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"Regex": "$"}, "content": " "},
    {"type": "Replace", "pattern": {"String": "@@ "}, "content": ""},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 0, "stop": 1},
]}  # fmt: skip


def mend_subword_nmt_decoder(backend) -> None:
    """Give a `tokenizers.Tokenizer` (None: nothing to do) whose decoder is the one `vaswani convert` wrote for
    subword-nmt fairseq models before (`PANICKING_SUBWORD_NMT_DECODER`) `subword_nmt_decoder` instead, in memory: the
    same text for every output, and "" rather than a Rust panic for an empty one (a translation that is <unk> alone
    crashed `vaswani translate`, a training evaluation, ...). The folder is not changed."""
    decoder = getattr(backend, "decoder", None)
    if decoder is not None and json.loads(decoder.__getstate__()) == PANICKING_SUBWORD_NMT_DECODER:
        backend.decoder = subword_nmt_decoder()


# ----------------------------------------------------------------------------------------------------------------
# What both light tokenizers share
# ----------------------------------------------------------------------------------------------------------------
class _ReadAlone:
    """What both light tokenizers compute alike: a call's two sides (`text`: the sources, `text_target`: the targets),
    ids and tokens converted one at a time (`_token`, `_token_id`), and transformers' own tokenizer (`full`:
    `load_tokenizer` of the folder), loaded on first use, for any other attribute and for the calls
    `_answered_by_transformers` leaves to it."""

    def __init__(self, folder: Path, full: Callable[[], Any]):
        self.name_or_path, self._load_full, self._full = str(folder), full, None

    def __call__(self, text: str | list[str] | None = None, text_target: str | list[str] | None = None,
                 add_special_tokens: bool = True, verbose: bool = True) -> dict:  # fmt: skip
        """As transformers': `input_ids` of `text`, and `labels` of `text_target` with it (its `input_ids` alone)."""
        if text is None and text_target is None:
            raise ValueError("You need to specify either `text` or `text_target`.")
        sides = [(name, value, target) for name, value, target in (
            ("input_ids", text, False), ("labels" if text is not None else "input_ids", text_target, True),
        ) if value is not None]  # fmt: skip
        batches = {name: [value] if isinstance(value, str) else list(value) for name, value, _ in sides}
        if self._answered_by_transformers(batches):
            full = self._full_tokenizer()(text, text_target=text_target, add_special_tokens=add_special_tokens,
                                          verbose=False)  # fmt: skip
            return {name: full[name] for name in batches}
        encoded = {}
        for name, value, target in sides:
            ids = self._encode_batch(batches[name], target, add_special_tokens)
            encoded[name] = ids[0] if isinstance(value, str) else ids
        return encoded

    def _answered_by_transformers(self, batches: dict[str, list[str]]) -> bool:
        return False

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        if isinstance(ids, int):
            return self._token(ids)
        skipped = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._token(int(index)) for index in ids if int(index) not in skipped]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            index = self._token_id(tokens)
            return self.unk_token_id if index is None else index
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def _full_tokenizer(self):
        if self._full is None:
            self._full = self._load_full()
        return self._full

    def __getattr__(self, name: str):
        if name.startswith("_"):  # not found above (copy, pickle and hasattr ask for these): no transformers load
            raise AttributeError(name)
        return getattr(self._full_tokenizer(), name)


# ----------------------------------------------------------------------------------------------------------------
# Our tokenizers: tokenizer.json by `tokenizers`
# ----------------------------------------------------------------------------------------------------------------
# tokenizer_config.json's entries that `LightTokenizer` reads as transformers does: the special tokens by name, and
# settings that change nothing in encoding or decoding without padding or truncation. Any other entry (add_bos_token,
# added_tokens_decoder, add_prefix_space, ...) means transformers changes the tokenizer as it loads it.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
LIGHT_TOKENIZER_ENTRIES = {*SPECIAL_TOKEN_NAMES, "extra_special_tokens", "split_special_tokens", "backend",
                           "tokenizer_class", "model_max_length", "clean_up_tokenization_spaces", "padding_side",
                           "truncation_side", "is_local", "local_files_only"}  # fmt: skip


def light_tokenizer(folder: Path, config: dict, full: Callable[[], Any]) -> LightTokenizer | None:
    """A `LightTokenizer` of `folder`'s tokenizer.json, or None where transformers' `PreTrainedTokenizerFast` would
    make something else of the folder: `config` (its tokenizer_config.json) holds an entry outside
    `LIGHT_TOKENIZER_ENTRIES`, cleans up spaces after decoding, or names a special token that tokenizer.json lacks
    as a special token, or tokenizer.json has no post-processor (transformers writes one) or over 100,000 tokens and
    a pre-tokenizer (transformers may patch its pattern). A file `tokenizers` cannot read raises, as
    `Tokenizer.from_file` does."""
    from tokenizers import Tokenizer

    if set(config) - LIGHT_TOKENIZER_ENTRIES or config.get("clean_up_tokenization_spaces"):
        return None
    specials = {name: config.get(name) for name in SPECIAL_TOKEN_NAMES}
    extra = config.get("extra_special_tokens") or []
    if not all(value is None or isinstance(value, str) for value in specials.values()) or not (
        isinstance(extra, list) and all(isinstance(token, str) for token in extra)
    ):
        return None  # AddedToken dicts (lstrip, rstrip, ...): transformers' reading
    backend = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    mend_subword_nmt_decoder(backend)
    added = {str(token) for token in backend.get_added_tokens_decoder().values() if token.special}
    if not all(token in added for token in [*filter(None, specials.values()), *extra]):
        return None
    if backend.post_processor is None or (backend.get_vocab_size() > 100_000 and backend.pre_tokenizer is not None):
        return None
    return LightTokenizer(folder, backend, specials, extra, bool(config.get("split_special_tokens", False)), full)


class LightTokenizer(_ReadAlone):
    """A plain fast tokenizer (tokenizer.json) read by the `tokenizers` library alone, for decoding a CTranslate2
    export without transformers (`load_tokenizer(..., light=True)`): the part of `PreTrainedTokenizerFast` that
    translating and scoring use, computed as it computes it (tests/tokenizer/test_bpe.py compares the two).

    - `tokenizer(text or texts, add_special_tokens=True)["input_ids"]`: the ids of a text, or of each text (and
      `text_target=`, encoded by the same tokenizer: `labels` beside `text`, `input_ids` alone);
    - `decode(ids, skip_special_tokens=False)`, `convert_ids_to_tokens(ids)`, `convert_tokens_to_ids(tokens)`;
    - the special tokens (`eos_token`, `eos_token_id`, ... for `SPECIAL_TOKEN_NAMES`; `all_special_ids`),
      `len(tokenizer)`, `get_vocab()` and `backend_tokenizer` (the `tokenizers.Tokenizer`).

    Any other attribute (`save_pretrained`, `batch_decode`, ...) loads transformers' tokenizer from the same folder
    (`full`: `load_tokenizer` of the folder) on first use and answers from it. Nothing here changes the backend after loading, so threads may share it."""

    def __init__(self, folder: Path, backend, specials: dict[str, str | None], extra: list[str], split_special: bool,
                 full: Callable[[], Any]):  # fmt: skip
        super().__init__(folder, full)
        backend.no_truncation()  # transformers' calls without truncation= or padding= turn both off
        backend.no_padding()
        backend.encode_special_tokens = split_special  # "<pad>" typed in a text is text, not the PAD token
        self._backend = backend
        for name, token in specials.items():
            setattr(self, name, token)
            setattr(self, f"{name}_id", None if token is None else backend.token_to_id(token))
        self.all_special_ids = sorted({backend.token_to_id(token) for token in [*filter(None, specials.values()),
                                                                                 *extra]})  # fmt: skip

    @property
    def backend_tokenizer(self):
        return self._backend

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        return self._backend.get_vocab(with_added_tokens=True)

    def _encode_batch(self, texts: list[str], target: bool, add_special_tokens: bool) -> list[list[int]]:
        # one tokenizer for both sides, as in `PreTrainedTokenizerFast`
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._backend.decode([ids] if isinstance(ids, int) else list(ids),
                                    skip_special_tokens=skip_special_tokens)  # fmt: skip

    def _token(self, index: int) -> str | None:
        return self._backend.id_to_token(index)

    def _token_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)


# ----------------------------------------------------------------------------------------------------------------
# A converted OPUS-MT model's MarianTokenizer by `sentencepiece`
# ----------------------------------------------------------------------------------------------------------------
# tokenizer_config.json's entries of a MarianTokenizer that `LightMarianTokenizer` reads as transformers does (OPUS-MT
# folders on the Hub and transformers 5's own save); any other entry is left to transformers' reading
LIGHT_MARIAN_ENTRIES = {"source_lang", "target_lang", "unk_token", "eos_token", "pad_token", "model_max_length",
                        "sp_model_kwargs", "separate_vocabs", "tokenizer_class", "added_tokens_decoder", "backend",
                        "is_local", "local_files_only", "special_tokens_map_file", "name_or_path",
                        "clean_up_tokenization_spaces", "target_vocab_file"}  # fmt: skip
MARIAN_SPECIAL_TOKENS = {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}  # MarianTokenizer's defaults


def light_marian_tokenizer(folder: Path, config: dict, full: Callable[[], Any]) -> LightMarianTokenizer | None:
    """A `LightMarianTokenizer` of `folder`'s MarianTokenizer files, or None where transformers would make something
    else of them: `config` (tokenizer_config.json) holds an entry outside `LIGHT_MARIAN_ENTRIES`, separate source and
    target vocabularies, sentencepiece options, cleans up spaces after decoding, or adds tokens other than its three
    special ones (plain: no stripping, no single-word rule), or the folder has an added_tokens.json or a
    special_tokens_map.json that names other special tokens."""
    if (
        set(config) - LIGHT_MARIAN_ENTRIES
        or config.get("separate_vocabs")
        or config.get("sp_model_kwargs")
        or config.get("clean_up_tokenization_spaces")
    ):
        return None
    specials = {name: config.get(name, default) for name, default in MARIAN_SPECIAL_TOKENS.items()}
    if not all(isinstance(token, str) for token in specials.values()) or (folder / "added_tokens.json").exists():
        return None
    mapping = folder / "special_tokens_map.json"
    if mapping.is_file() and any(
        read_json_object(mapping).get(name, token) != token for name, token in specials.items()
    ):
        return None
    plain = {"lstrip": False, "rstrip": False, "single_word": False, "special": True}
    added = config.get("added_tokens_decoder") or {}
    if not isinstance(added, dict) or any(
        not isinstance(entry, dict) or entry.get("content") not in specials.values()
        or any(entry.get(flag, value) != value for flag, value in plain.items())
        for entry in added.values()
    ):  # fmt: skip
        return None
    import sentencepiece

    vocab = read_json_object(folder / "vocab.json")
    if not all(token in vocab for token in specials.values()):
        return None  # transformers refuses it: its error
    models = [
        sentencepiece.SentencePieceProcessor(model_file=str(folder / name)) for name in ("source.spm", "target.spm")
    ]
    return LightMarianTokenizer(folder, vocab, specials, *models, full)


class LightMarianTokenizer(_ReadAlone):
    """A converted OPUS-MT model's MarianTokenizer (source.spm, target.spm, the joint vocab.json) read by
    `sentencepiece` alone, for translating with a CTranslate2 export without transformers (`load_tokenizer(...,
    light=True)`): the part of transformers' `MarianTokenizer` that translating and scoring use, computed as it
    computes it (tests/convert/test_marian.py compares the two), with `LightTokenizer`'s interface.

    Sources are cut by source.spm and targets (`text_target=`) by target.spm, a leading language code (`>>es<<`) kept
    whole, each piece looked up in vocab.json (`<unk>` when missing), `</s>` appended; decoding joins the pieces as
    transformers does (the special tokens as words). Each call picks its model and changes nothing, so threads may
    share it. A text that spells a special token (transformers cuts the text around it) and any other attribute go to
    transformers' MarianTokenizer (`full`: `load_tokenizer` of the folder), loaded on first use."""

    backend_tokenizer = None  # no Rust tokenizer, as MarianTokenizer has none (asking must not load transformers)

    def __init__(self, folder: Path, vocab: dict[str, int], specials: dict[str, str], source, target,
                 full: Callable[[], Any]):  # fmt: skip
        super().__init__(folder, full)
        self._vocab, self._pieces = vocab, {index: token for token, index in vocab.items()}
        self._source, self._target = source, target
        for name in SPECIAL_TOKEN_NAMES:
            token = specials.get(name)
            setattr(self, name, token)
            setattr(self, f"{name}_id", None if token is None else vocab[token])
        self._special_tokens = set(specials.values())
        self.all_special_ids = sorted(vocab[token] for token in self._special_tokens)

    def __len__(self) -> int:
        return len(self._vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def _answered_by_transformers(self, batches: dict[str, list[str]]) -> bool:
        """A text that spells a special token: transformers cuts the text around it."""
        return any(token in one for batch in batches.values() for one in batch for token in self._special_tokens)

    def _encode_batch(self, texts: list[str], target: bool, add_special_tokens: bool) -> list[list[int]]:
        model = self._target if target else self._source  # source.spm for sources, target.spm for targets
        return [self._encode(one, model, add_special_tokens) for one in texts]

    def _encode(self, text: str, model, add_special_tokens: bool) -> list[int]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # MarianTokenizer.remove_language_code
            code, text = [text[: end + 2]], text[end + 2 :]
        ids = [self._vocab.get(piece, self.unk_token_id) for piece in [*code, *model.encode(text, out_type=str)]]
        return [*ids, self.eos_token_id] if add_special_tokens else ids

    def _token(self, index: int) -> str:
        if index in self._pieces:
            return self._pieces[index]
        piece = self._source.id_to_piece(index)  # MarianTokenizer's fallback (its decoding model: the source's)
        return piece or self.unk_token

    def _token_id(self, token: str) -> int | None:
        return self._vocab.get(token)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """MarianTokenizer.convert_tokens_to_string with a shared vocabulary: the source model joins the pieces."""
        text, pieces = "", []
        for token in self.convert_ids_to_tokens([ids] if isinstance(ids, int) else list(ids), skip_special_tokens):
            if token in self._special_tokens:
                text += self._source.decode_pieces(pieces) + token + " "
                pieces = []
            else:
                pieces.append(token)
        text += self._source.decode_pieces(pieces)
        return text.replace("\u2581", " ").strip()
