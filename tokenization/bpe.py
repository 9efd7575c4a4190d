"""The paper's byte-pair encoding: one BPE vocabulary shared by source and target (about 37k for English-German).

The pipeline is built on Hugging Face's `tokenizers` library, in the SentencePiece style:

    normalizer     Unicode normalization (NFKC by default), then "▁" prepended to the text
    pre-tokenizer  Metaspace: every space replaced by "▁" and the text split before each "▁", so merges never
                   cross a word boundary
    model          BPE with byte fallback: a character outside the vocabulary becomes its UTF-8 bytes
                   <0x00>..<0xFF>, so no text ever maps to <unk>. A word that is itself in the vocabulary is
                   looked up whole instead of replaying the merges (`ignore_merges`; same ids, faster)
    decoder        "▁" -> " ", bytes -> characters, drop the one space added in front

so that `decode(encode(text)) == normalize(text).replace("▁", " ")` for any Unicode text: runs of spaces,
leading and trailing spaces, tabs, newlines and control characters all come back. (U+2581 "▁" itself is the
word-boundary marker and decodes to a space, as in SentencePiece.) The post-processor appends </s> to every
sequence and adds no <s>: the model shifts the labels right with its decoder start token itself.

The result is a `transformers.PreTrainedTokenizerFast` whose saved folder (tokenizer.json and
tokenizer_config.json) loads with `AutoTokenizer.from_pretrained` without this package.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from .corpus import Corpus, PathLike, corpus_from_dataset, corpus_from_files, corpus_from_iterator
from .errors import TokenizerError, TokenizerTrainingError

if TYPE_CHECKING:
    from datasets import Dataset

# Token ids are the list positions. "paper": PAD 0 (the model config's default); "fairseq": fairseq's dictionary.
SPECIAL_TOKEN_LAYOUTS: dict[str, list[str]] = {
    "paper": ["<pad>", "<s>", "</s>", "<unk>"],
    "fairseq": ["<s>", "<pad>", "</s>", "<unk>"],
}
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
MASK_TOKEN = "<mask>"  # optional (`mask_token=True`): the masked language model's mask, after the trained ids
# Unused special tokens that round the vocabulary up to a multiple of `pad_to_multiple_of`, last of all (fairseq's
# `Dictionary.pad_to_multiple_` names its own "madeupword0000", ...; the brackets mark these as special tokens).
FILLER_TOKEN = "<madeupword{:04d}>"
FILLER_PATTERN = re.compile(r"<madeupword\d{4,}>")  # 10,000 and more have more digits

UNICODE_NORMALIZERS: dict[str, type[normalizers.Normalizer] | None] = {
    "NFKC": normalizers.NFKC,
    "NFC": normalizers.NFC,
    "NFKD": normalizers.NFKD,
    "NFD": normalizers.NFD,
    "none": None,
}

WORD_BOUNDARY = "\u2581"  # "▁", SentencePiece's meta symbol for a space
BYTE_FALLBACK_TOKENS = [f"<0x{byte:02X}>" for byte in range(256)]


def train_bpe_tokenizer(
    *,
    files: PathLike | Sequence[PathLike] | None = None,
    iterator: Iterable[str | Sequence[str]] | None = None,
    dataset: Dataset | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    vocab_size: int = 37000,
    min_frequency: int = 2,
    special_tokens_layout: str = "paper",
    normalization: str | None = "NFKC",
    model_max_length: int = 1024,
    limit_alphabet: int | None = None,
    ignore_merges: bool = True,
    show_progress: bool | None = None,
    mask_token: bool = False,
    pad_to_multiple_of: int = 8,
) -> PreTrainedTokenizerFast:
    """Train one BPE vocabulary on both sides of a parallel corpus.

    Give exactly one of `files`, `iterator` or `dataset`.

    Args:
        files: plain-text UTF-8 files, one sentence per line, both sides of the corpus (e.g. train.en and train.de).
        iterator: an iterable of sentences (str) or of batches of sentences (lists of str), both sides.
        dataset: a `datasets.Dataset` whose "translation" column holds {source_lang: str, target_lang: str}.
        source_lang, target_lang: the two keys of the translation column; read from the first row if not given.
        vocab_size: size of the trained vocabulary, counting special tokens, the 256 byte tokens and the
            characters of the corpus. Reached exactly unless the corpus runs out of pairs seen `min_frequency` times;
            `len(tokenizer)` is afterwards rounded up to a multiple of `pad_to_multiple_of`.
        min_frequency: a pair of symbols is merged only if it occurs at least this often.
        special_tokens_layout: "paper" (<pad> 0, <s> 1, </s> 2, <unk> 3) or "fairseq" (<s> 0, <pad> 1, </s> 2,
            <unk> 3); see `SPECIAL_TOKEN_LAYOUTS`.
        normalization: "NFKC" (default), "NFC", "NFKD", "NFD", or None / "none" for no Unicode normalization.
        model_max_length: maximum sequence length recorded in the tokenizer (used when truncating).
        limit_alphabet: keep only this many most frequent characters as symbols; rarer characters are encoded
            as bytes. None keeps every character of the corpus.
        ignore_merges: encode a word that is in the vocabulary as that one token without replaying the merges
            (saved in tokenizer.json): up to about 25% faster encoding, for words that miss the BPE cache. Set
            only after checking that the merges give every word token of the vocabulary back whole, so the ids
            are the same either way (see `words_the_merges_split`). False replays the merges for every word.
        show_progress: progress bars while reading and merging; None shows them for large corpora only.
        mask_token: add the special token "<mask>" for masked language modelling (`tokenizer.mask_token`). It gets
            the id after the trained ones (vocab_size when that is reached), so every other token keeps the id it
            has without it, and a seq2seq tokenizer trained on the same corpus shares its ids. In text, "<mask>"
            (with the spaces around it) is the mask token, which fill-mask queries need; such a tokenizer therefore
            recognises its special tokens in text (as BERT's and RoBERTa's do: a literal "</s>" is then EOS), while
            one without a mask token encodes them as characters.
        pad_to_multiple_of: round `len(tokenizer)` up to a multiple of this with unused special tokens
            (`FILLER_TOKEN`: "<madeupword0000>", ...) after every other id, as fairseq pads its dictionaries to a
            multiple of 8. The products with the vocabulary as a dimension (the output layer, the gradient of the
            logits) then keep the 16-byte alignment of a GPU's tensor-core kernels: on an H200, big's training step
            ran 1.14x as fast with 12,112 tokens as with 12,111 (benchmarks/README.md). The fillers never occur in
            encoded text, and decoding with `skip_special_tokens=True` drops them. 1 adds none.

    Returns:
        A `PreTrainedTokenizerFast`: `tokenizer(src, text_target=tgt)` gives `input_ids` and `labels`, each the
        tokens followed by </s>.

    Raises:
        TokenizerTrainingError: bad arguments, a missing file, an empty corpus, or a vocabulary smaller than the
            alphabet plus special and byte tokens.
    """
    special_tokens = _special_tokens(special_tokens_layout)
    min_vocab_size = len(special_tokens) + len(BYTE_FALLBACK_TOKENS) + 1
    if vocab_size < min_vocab_size:
        raise TokenizerTrainingError(
            f"vocab_size={vocab_size} is too small: the {len(special_tokens)} special tokens and "
            f"{len(BYTE_FALLBACK_TOKENS)} byte tokens alone take {min_vocab_size - 1}; use a vocab_size of a few "
            f"thousand or more (the paper uses 37000 for English-German)."
        )
    if min_frequency < 1:
        raise TokenizerTrainingError(f"min_frequency={min_frequency} must be at least 1.")
    if not isinstance(ignore_merges, bool):
        raise TokenizerTrainingError(f"ignore_merges={ignore_merges!r} must be True or False.")
    if not isinstance(mask_token, bool):
        raise TokenizerTrainingError(f"mask_token={mask_token!r} must be True or False.")
    if isinstance(pad_to_multiple_of, bool) or not isinstance(pad_to_multiple_of, int) or pad_to_multiple_of < 1:
        raise TokenizerTrainingError(
            f"pad_to_multiple_of={pad_to_multiple_of!r} must be a whole number of at least 1 (8 aligns a GPU's "
            "kernels; 1 adds no filler tokens)."
        )
    corpus = _corpus(files, iterator, dataset, source_lang, target_lang)
    if show_progress is None:
        show_progress = corpus.is_large

    tokenizer = build_bpe_pipeline(normalization)
    trainer = trainers.BpeTrainer(
        # The byte tokens are added after training, so the trainer gets the rest of the budget.
        vocab_size=vocab_size - len(BYTE_FALLBACK_TOKENS),
        min_frequency=min_frequency,
        special_tokens=[AddedToken(token, special=True, normalized=False) for token in special_tokens],
        show_progress=show_progress,
        **({} if limit_alphabet is None else {"limit_alphabet": limit_alphabet}),
    )
    length = corpus.progress_length() if show_progress else None
    tokenizer.train_from_iterator(corpus.batches, trainer=trainer, length=length)

    _check_trained_vocabulary(tokenizer, special_tokens, vocab_size, corpus)
    tokenizer = _with_byte_fallback(tokenizer, num_special_tokens=len(special_tokens))
    if ignore_merges:
        _switch_on_ignore_merges(tokenizer)
    tokenizer.post_processor = eos_post_processor(tokenizer)
    if mask_token:
        # Appended: the next free id. lstrip/rstrip: "the <mask> sat" -> ▁the <mask> ▁sat, the mask standing for a
        # whole "▁word" token as the model sees it.
        tokenizer.add_special_tokens(
            [AddedToken(MASK_TOKEN, special=True, normalized=False, lstrip=True, rstrip=True)]
        )
    _pad_vocabulary(tokenizer, pad_to_multiple_of)
    return _wrap(tokenizer, model_max_length, mask_token=MASK_TOKEN if mask_token else None)


def build_bpe_pipeline(normalization: str | None = "NFKC") -> Tokenizer:
    """An untrained BPE tokenizer with the normalizer, pre-tokenizer and decoder described in the module docstring."""
    unicode_normalizer = _unicode_normalizer(normalization)
    tokenizer = Tokenizer(models.BPE(unk_token=UNK_TOKEN, byte_fallback=True))
    # The "▁" is prepended unconditionally: Metaspace's own prepend_scheme="always" skips text that already starts
    # with a space, so " a" and "a" would encode alike and the leading space would be lost.
    prepend = normalizers.Prepend(WORD_BOUNDARY)
    tokenizer.normalizer = normalizers.Sequence([unicode_normalizer, prepend] if unicode_normalizer else [prepend])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_BOUNDARY, prepend_scheme="never", split=True)
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace(WORD_BOUNDARY, " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tokenizer


def _wrap(tokenizer: Tokenizer, model_max_length: int, mask_token: str | None = None) -> PreTrainedTokenizerFast:
    """Wrap a trained `tokenizers.Tokenizer` as the `transformers` tokenizer the model and scripts use."""
    return PortableTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        **({} if mask_token is None else {"mask_token": mask_token}),
        model_max_length=model_max_length,
        # Text is data: a literal "</s>" in a sentence is encoded as characters, not as the special token. A masked-LM
        # tokenizer must recognise "<mask>" in a fill-mask query, and transformers matches all special tokens or none.
        split_special_tokens=mask_token is None,
        # Spacing is restored by the decoder; the default clean-up would turn "a ." into "a.".
        clean_up_tokenization_spaces=False,
    )


class PortableTokenizerFast(PreTrainedTokenizerFast):
    """A `PreTrainedTokenizerFast` that saves itself under that class name.

    transformers 5 records its fast class as "TokenizersBackend" in tokenizer_config.json, a name transformers 4
    does not know. "PreTrainedTokenizerFast" loads in both with `AutoTokenizer.from_pretrained`, and needs no code
    from this package.
    """

    def _save_pretrained(self, save_directory: PathLike, file_names: tuple[str, ...], *args, **kwargs):
        # Called by `save_pretrained` after it wrote tokenizer_config.json and before any upload to the Hub.
        for path in file_names:
            if os.path.basename(path).endswith("tokenizer_config.json"):
                with open(path, encoding="utf-8") as stream:
                    config = json.load(stream)
                config["tokenizer_class"] = "PreTrainedTokenizerFast"
                with open(path, "w", encoding="utf-8") as stream:
                    stream.write(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        return super()._save_pretrained(save_directory, file_names, *args, **kwargs)


# --- helpers -------------------------------------------------------------------------------------------------


def _special_tokens(layout: str) -> list[str]:
    if layout not in SPECIAL_TOKEN_LAYOUTS:
        raise TokenizerTrainingError(
            f"unknown special_tokens_layout {layout!r}: choose one of {sorted(SPECIAL_TOKEN_LAYOUTS)}."
        )
    return SPECIAL_TOKEN_LAYOUTS[layout]


def _unicode_normalizer(normalization: str | None) -> normalizers.Normalizer | None:
    if normalization is None or str(normalization).lower() == "none":
        return None
    normalizer_class = UNICODE_NORMALIZERS.get(str(normalization).upper())
    if normalizer_class is None:
        raise TokenizerTrainingError(
            f"unknown normalization {normalization!r}: choose one of {list(UNICODE_NORMALIZERS)} (or None)."
        )
    return normalizer_class()


def _corpus(
    files: PathLike | Sequence[PathLike] | None,
    iterator: Iterable[str | Sequence[str]] | None,
    dataset: Dataset | None,
    source_lang: str | None,
    target_lang: str | None,
) -> Corpus:
    given = [
        name for name, value in (("files", files), ("iterator", iterator), ("dataset", dataset)) if value is not None
    ]
    if len(given) != 1:
        problem = "none was given" if not given else f"got {' and '.join(given)}"
        raise TokenizerTrainingError(f"give exactly one of files, iterator or dataset ({problem}).")
    if files is not None:
        return corpus_from_files(files)
    if iterator is not None:
        return corpus_from_iterator(iterator)
    return corpus_from_dataset(dataset, source_lang, target_lang)


def _check_trained_vocabulary(
    tokenizer: Tokenizer, special_tokens: Sequence[str], vocab_size: int, corpus: Corpus
) -> None:
    """Reject an empty corpus, and a vocabulary that the alphabet alone already overflows."""
    learned = [token for token in tokenizer.get_vocab() if token not in special_tokens]
    if not any(token.replace(WORD_BOUNDARY, " ").strip() for token in learned):
        raise TokenizerTrainingError(f"the corpus is empty: {corpus.description} contains no text.")
    size = len(learned) + len(special_tokens) + len(BYTE_FALLBACK_TOKENS)
    if size > vocab_size:
        raise TokenizerTrainingError(
            f"vocab_size={vocab_size} is smaller than the alphabet: the corpus has {len(learned)} distinct characters, "
            f"which with {len(special_tokens)} special tokens and {len(BYTE_FALLBACK_TOKENS)} byte tokens make "
            f"{size}. Use a vocab_size well above {size} (room for merges), or limit_alphabet to encode rare "
            "characters as bytes."
        )


def _with_byte_fallback(tokenizer: Tokenizer, num_special_tokens: int) -> Tokenizer:
    """Insert the 256 byte tokens <0x00>..<0xFF> right after the special tokens (SentencePiece's order).

    The `tokenizers` trainer does not create them. They go into the model's vocabulary, not into the added
    (special) tokens, so `skip_special_tokens=True` keeps the characters they spell.
    """
    state = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)  # the trainer puts the special tokens first, in layout order
    clashes = set(tokens) & set(BYTE_FALLBACK_TOKENS)
    if clashes:  # a merge spelled "<0x41>" literally; it would be decoded as a byte
        raise TokenizerTrainingError(
            f"the corpus taught BPE the token(s) {sorted(clashes)}, which spell byte tokens: remove that markup."
        )
    tokens = tokens[:num_special_tokens] + BYTE_FALLBACK_TOKENS + tokens[num_special_tokens:]
    state["model"]["vocab"] = {token: index for index, token in enumerate(tokens)}
    state["model"]["byte_fallback"] = True
    return Tokenizer.from_str(json.dumps(state))


def words_the_merges_split(tokenizer: Tokenizer) -> list[str]:
    """The word tokens (those starting with "▁") that replaying the BPE merges does not give back as one token.

    Every pre-tokenized word starts with "▁", so these are the only tokens that `ignore_merges` could encode
    differently: for each of them, a word spelled like the token would become that one token instead of the pieces
    the merges leave. An empty list means ignore_merges changes no ids.
    """
    model = tokenizer.model
    return [
        token
        for token, token_id in tokenizer.get_vocab(with_added_tokens=False).items()
        if token.startswith(WORD_BOUNDARY) and [piece.id for piece in model.tokenize(token)] != [token_id]
    ]


def _pad_vocabulary(tokenizer: Tokenizer, multiple: int) -> None:
    """Append filler special tokens (`FILLER_TOKEN`) until the vocabulary is a multiple of `multiple`, in place."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    tokenizer.add_special_tokens(
        [AddedToken(FILLER_TOKEN.format(i), special=True, normalized=False) for i in range(-size % multiple)]
    )


def _switch_on_ignore_merges(tokenizer: Tokenizer) -> None:
    """Make the BPE model look words of the vocabulary up whole, if that gives the ids the merges give.

    The vocabularies the `tokenizers` trainer learns pass this check (all 37k tokens of the benchmark's vocabulary,
    for one); if one ever fails it, the merges are kept and a warning names the tokens.
    """
    split_words = words_the_merges_split(tokenizer)
    if split_words:
        warnings.warn(
            f"ignore_merges left off: the merges split {len(split_words)} word token(s) of the vocabulary (e.g. "
            f"{split_words[:3]}), so looking words up whole would change their ids.",
            stacklevel=3,
        )
        return
    tokenizer.model.ignore_merges = True  # in place; saved in tokenizer.json


def first_tokens(tokenizer: Tokenizer, vocab_size: int) -> Tokenizer:
    """The BPE of `tokenizer` cut to its first `vocab_size` ids: the special and byte tokens, the alphabet and the
    earliest merges, with the same ids (what `vaswani prune --vocab_size` gives a model's embeddings).

    The trainer learns merges most frequent first and numbers each merged token after its parts, so the first ids
    are the vocabulary a training with the smaller `vocab_size` learns from the same corpus; a text is segmented into
    more, shorter tokens. Every id of the cut tokenizer is the same token as before; the unused filler tokens that
    round a trained vocabulary up (`FILLER_TOKEN`) go with the ids cut, so the result has exactly `vocab_size` ids
    (a multiple of 8 keeps a GPU's kernels aligned). Refused (`TokenizerError`) for a tokenizer that is not such a
    BPE (a merge numbered before its parts, e.g. a converted SentencePiece model), another added token among the ids
    cut (a masked LM's `<mask>`), or a size that leaves no merge or is not smaller.
    """
    state = json.loads(tokenizer.to_str())
    model = state["model"]
    if model.get("type") != "BPE":
        raise TokenizerError(f"only a BPE vocabulary can be cut to its first tokens; this one is {model.get('type')}")
    vocab: dict[str, int] = model["vocab"]
    merges = [merge.split(" ") if isinstance(merge, str) else merge for merge in model["merges"]]  # "a b" or [a, b]
    merged_ids = [vocab.get("".join(merge)) for merge in merges]
    in_order = all(
        merged is not None and all(vocab.get(part, merged) < merged for part in merge) and (previous < merged)
        for merge, merged, previous in zip(merges, merged_ids, [-1, *merged_ids[:-1]], strict=True)
    )  # fmt: skip
    if not in_order:
        raise TokenizerError("the BPE merges are not numbered in the order they were learned (each merged token after "
                             "its parts and the earlier merges): its first ids are not a smaller vocabulary")  # fmt: skip
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    first_merge = merged_ids[0] if merged_ids else size
    if not first_merge < vocab_size < size:
        raise TokenizerError(f"vocab_size {vocab_size} must be smaller than the vocabulary ({size}) and above the "
                             f"{first_merge} tokens that come before the first merge")  # fmt: skip
    needed = [token for token in state["added_tokens"] if not FILLER_PATTERN.fullmatch(token["content"])]
    cut = [token["content"] for token in needed if token["id"] >= vocab_size]
    if cut:
        raise TokenizerError(f"vocab_size {vocab_size} would cut the added token(s) {cut}: keep at least "
                             f"{1 + max(token['id'] for token in needed)} ids")  # fmt: skip
    state["added_tokens"] = [token for token in state["added_tokens"] if token["id"] < vocab_size]
    model["vocab"] = {token: index for token, index in vocab.items() if index < vocab_size}
    model["merges"] = [merge for merge, merged in zip(model["merges"], merged_ids, strict=True) if merged < vocab_size]
    return Tokenizer.from_str(json.dumps(state))


def eos_post_processor(tokenizer: Tokenizer) -> processors.TemplateProcessing:
    """The post-processor that ends every text with `</s>` (each side of a pair too), as the trained BPE and a
    converted fairseq tokenizer (vaswani/convert/fairseq.py) do."""
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    return processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}", special_tokens=[(EOS_TOKEN, eos_id)]
    )
