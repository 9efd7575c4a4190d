"""Tests of the BPE pipeline in `tokenization/`: round trip, special tokens, saving and loading, CLI errors."""

from __future__ import annotations

import itertools
import json
import os
import site
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from tokenization import (
    SPECIAL_TOKEN_LAYOUTS,
    TokenizerError,
    TokenizerTrainingError,
    load_tokenizer,
    train_bpe_tokenizer,
)
from tokenization.bpe import first_tokens
from vaswani.errors import ModelFolderError
from vaswani.light_tokenizers import SPECIAL_TOKEN_NAMES, LightTokenizer

# --- a small English-German corpus -----------------------------------------------------------------------------

PAIRS = [
    ("The house is small.", "Das Haus ist klein."),
    ("The weather is nice today.", "Das Wetter ist heute schön."),
    ("I would like a cup of coffee, please.", "Ich hätte gern eine Tasse Kaffee, bitte."),
    ("Where is the train station?", "Wo ist der Bahnhof?"),
    ("We are going to the museum tomorrow.", "Wir gehen morgen ins Museum."),
    ("She has been learning German for three years.", "Sie lernt seit drei Jahren Deutsch."),
    ("The meeting was postponed until Friday.", "Die Besprechung wurde auf Freitag verschoben."),
    ("Can you help me with my luggage?", "Können Sie mir mit meinem Gepäck helfen?"),
    ("The children are playing in the garden.", "Die Kinder spielen im Garten."),
    ("This book is very interesting.", "Dieses Buch ist sehr interessant."),
    ("He drives to work every day.", "Er fährt jeden Tag zur Arbeit."),
    ("The shop closes at eight o'clock.", "Das Geschäft schließt um acht Uhr."),
    ("My grandmother lives in Munich.", "Meine Großmutter wohnt in München."),
    (
        "The negotiations between the two countries failed.",
        "Die Verhandlungen zwischen den beiden Ländern scheiterten.",
    ),
    ("The European Parliament adopted the resolution.", "Das Europäische Parlament nahm die Entschließung an."),
    ("Prices rose by 3 % last year.", "Die Preise stiegen im vergangenen Jahr um 3 %."),
    ("Please close the window, it is cold.", "Bitte schließ das Fenster, es ist kalt."),
    ("The train to Berlin is late again.", "Der Zug nach Berlin hat wieder Verspätung."),
    ("I don't understand the question.", "Ich verstehe die Frage nicht."),
    ("The government must protect the environment.", "Die Regierung muss die Umwelt schützen."),
]
SUBJECTS = [
    ("The old man", "Der alte Mann"),
    ("My sister", "Meine Schwester"),
    ("Our teacher", "Unsere Lehrerin"),
    ("A young woman", "Eine junge Frau"),
    ("The doctor", "Der Arzt"),
    ("His brother", "Sein Bruder"),
    ("The farmer", "Der Bauer"),
    ("Every student", "Jeder Student"),
]
VERBS = [
    ("reads", "liest"),
    ("writes", "schreibt"),
    ("buys", "kauft"),
    ("finds", "findet"),
    ("carries", "trägt"),
    ("forgets", "vergisst"),
]
OBJECTS = [
    ("a long letter", "einen langen Brief"),
    ("the newspaper", "die Zeitung"),
    ("an old map", "eine alte Karte"),
    ("the green bicycle", "das grüne Fahrrad"),
    ("a heavy suitcase", "einen schweren Koffer"),
    ("the small gift", "das kleine Geschenk"),
]
ENDINGS = [
    ("in the morning.", "am Morgen."),
    ("every Sunday.", "jeden Sonntag."),
    ("near the river.", "in der Nähe des Flusses."),
    ("with great care.", "mit großer Sorgfalt."),
    ("before the holidays.", "vor den Ferien."),
]


def parallel_corpus() -> tuple[list[str], list[str]]:
    """240 generated sentence pairs plus 20 written ones, in a fixed order."""
    english, german = [en for en, _ in PAIRS], [de for _, de in PAIRS]
    combinations = itertools.product(SUBJECTS, VERBS, OBJECTS, ENDINGS)
    for subject, verb, obj, ending in itertools.islice(combinations, 0, None, 6):
        english.append(f"{subject[0]} {verb[0]} {obj[0]} {ending[0]}")
        # German main clauses put the time/place adverbial after the object, like English here.
        german.append(f"{subject[1]} {verb[1]} {obj[1]} {ending[1]}")
    return english, german


ENGLISH, GERMAN = parallel_corpus()
SMALL_VOCAB = 400  # 4 special + 256 byte tokens + ~70 characters leave room for merges


def write_corpus(directory: Path) -> list[Path]:
    files = [directory / "train.en", directory / "train.de"]
    for path, lines in zip(files, (ENGLISH, GERMAN), strict=True):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return files


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def tokenizer(corpus_files):
    return train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB)


# --- round trip --------------------------------------------------------------------------------------------------


def unicode_database_disagreements() -> list[str]:
    """Characters on which the Unicode tables of `tokenizers` and of Python's `unicodedata` disagree.

    `tokenizers` normalizes with older tables than Python 3.11's Unicode 14.0: characters whose decomposition was
    added later (e.g. U+32FF SQUARE ERA NAME REIWA) are left as they are. Only characters with a decomposition in
    Python's tables can differ; the canonical parts of those decompositions are excluded too (they compose).
    """
    forms = {form: getattr(normalizers, form)() for form in ("NFC", "NFD", "NFKC", "NFKD")}
    excluded = set()
    for code_point in range(sys.maxunicode + 1):
        char = chr(code_point)
        decomposition = unicodedata.decomposition(char)
        if decomposition and any(forms[f].normalize_str(char) != unicodedata.normalize(f, char) for f in forms):
            excluded.add(char)
            if not decomposition.startswith("<"):
                excluded.update(chr(int(part, 16)) for part in decomposition.split())
    return sorted(excluded)


def expected_round_trip(text: str, form: str | None) -> str:
    """The documented normalization: Unicode `form`, and "▁" (the word-boundary marker) read as a space."""
    return (unicodedata.normalize(form, text) if form else text).replace("\u2581", " ")


INTERESTING = [
    *[" ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2581"],  # spaces, line breaks, the "▁" marker itself
    *["\x00", "\x1b", "\x7f", "\u200b"],  # control and invisible characters
    *["é", "e\u0301", "ß", "ﬁ", "²", "Å"],  # accents, composed and not; compatibility characters
    *["日本", "😀", "👩\u200d👩\u200d👧"],  # CJK, emoji, emoji sequence (4-byte UTF-8)
    *["</s>", "<s>", "<0x41>"],  # text that looks like special or byte tokens
]
# Any character (surrogates cannot be encoded), mixed with pieces that stress spacing, bytes and normalization.
texts = st.lists(
    st.one_of(
        st.characters(codec="utf-8", exclude_characters=unicode_database_disagreements()), st.sampled_from(INTERESTING)
    ),
    max_size=30,
).map("".join)


@pytest.fixture(scope="module")
def tokenizers_by_normalization(corpus_files):
    return {
        form: train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB, normalization=form)
        for form in ("NFKC", "NFD", None)
    }


@pytest.mark.parametrize("form", ["NFKC", "NFD", None])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts)
@example(text="")
@example(text="   leading and trailing   ")
@example(text="Die Größe des Gepäcks – 23 kg – überschreitet das Limit 😀.")
@example(text="日本語のテキストと한국어 텍스트")
@example(text="tab\tnew\nline\x00null \u2581 marker")
@example(text="e\u0301 ﬁ ² Å")
def test_decode_encode_returns_normalized_text(tokenizers_by_normalization, form, text):
    tok = tokenizers_by_normalization[form]
    ids = tok(text)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True) == expected_round_trip(text, form)


def test_unseen_characters_use_byte_tokens_not_unk(tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("漢 😀")["input_ids"])
    assert "<unk>" not in tokens
    assert tokens.count("<0xF0>") == 1  # the emoji's four UTF-8 bytes start with F0
    assert "<0xF0>" not in tokenizer.all_special_tokens


def test_normalization_is_configurable(corpus_files):
    nfkc = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB, normalization="NFKC")
    raw = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB, normalization=None)
    text = "ﬁve m²"
    assert nfkc.decode(nfkc(text)["input_ids"], skip_special_tokens=True) == "five m2"
    assert raw.decode(raw(text)["input_ids"], skip_special_tokens=True) == text


# --- looking words of the vocabulary up whole (ignore_merges) ---------------------------------------------------


def test_ignore_merges_changes_no_ids(corpus_files, tmp_path):
    looked_up = train_bpe_tokenizer(files=corpus_files, vocab_size=600)
    replayed = train_bpe_tokenizer(files=corpus_files, vocab_size=600, ignore_merges=False)
    looked_up.save_pretrained(tmp_path / "tok")
    saved = json.loads((tmp_path / "tok" / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["model"]["ignore_merges"] is True
    assert json.loads(replayed.backend_tokenizer.to_str())["model"]["ignore_merges"] is False
    # Every word token of the vocabulary, spelled out as text, and the corpus itself: the same ids either way.
    words = [token[1:] for token in looked_up.get_vocab() if token.startswith("\u2581") and len(token) > 1]
    assert len(words) > 100
    texts = words + ENGLISH + GERMAN
    assert looked_up(texts)["input_ids"] == replayed(texts)["input_ids"]


def test_ignore_merges_is_left_off_when_the_merges_split_a_word_token():
    from tokenizers import Tokenizer, models

    from tokenization.bpe import _switch_on_ignore_merges, words_the_merges_split

    # "a"+"b" is merged first, so the merges turn "▁ab" into "▁" "ab" and never reach the token "▁ab"
    # (made from "▁a"+"b" in some other context); looking "▁ab" up whole would give a different id.
    vocab = {"\u2581": 0, "a": 1, "b": 2, "ab": 3, "\u2581a": 4, "\u2581ab": 5}
    merges = [("a", "b"), ("\u2581", "a"), ("\u2581a", "b")]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    assert words_the_merges_split(tokenizer) == ["\u2581ab"]
    with pytest.warns(UserWarning, match="ignore_merges left off"):
        _switch_on_ignore_merges(tokenizer)
    assert json.loads(tokenizer.to_str())["model"]["ignore_merges"] is False
    assert [token.value for token in tokenizer.model.tokenize("\u2581ab")] == ["\u2581", "ab"]


def test_cli_can_switch_ignore_merges_off(corpus_files, tmp_path, capsys):
    from tokenization.__main__ import main

    files = list(map(str, corpus_files))
    assert main(["train", "--files", *files, "--vocab_size", "400", "--output_dir", str(tmp_path / "on")]) == 0
    assert (
        main(
            [
                "train",
                "--files",
                *files,
                "--vocab_size",
                "400",
                "--no_ignore_merges",
                "--output_dir",
                str(tmp_path / "off"),
            ]
        )
        == 0
    )
    for name, expected in (("on", True), ("off", False)):
        saved = json.loads((tmp_path / name / "tokenizer.json").read_text(encoding="utf-8"))
        assert saved["model"]["ignore_merges"] is expected
    assert "saved a BPE tokenizer with 400 tokens" in capsys.readouterr().out


# --- special tokens and model inputs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "expected"),
    [("paper", {"pad": 0, "bos": 1, "eos": 2, "unk": 3}), ("fairseq", {"bos": 0, "pad": 1, "eos": 2, "unk": 3})],
)
def test_special_token_ids(corpus_files, layout, expected):
    tok = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB, special_tokens_layout=layout)
    ids = {"pad": tok.pad_token_id, "bos": tok.bos_token_id, "eos": tok.eos_token_id, "unk": tok.unk_token_id}
    assert ids == expected
    assert tok.convert_ids_to_tokens(list(range(4))) == SPECIAL_TOKEN_LAYOUTS[layout]
    assert tok.convert_ids_to_tokens([4, 4 + 255]) == ["<0x00>", "<0xFF>"]  # bytes follow the special tokens


def test_text_target_gives_labels_ending_with_eos(tokenizer):
    batch = tokenizer(ENGLISH[:3], text_target=GERMAN[:3])
    for source, target, input_ids, labels in zip(
        ENGLISH[:3], GERMAN[:3], batch["input_ids"], batch["labels"], strict=True
    ):
        assert input_ids[-1] == labels[-1] == tokenizer.eos_token_id
        assert tokenizer.eos_token_id not in input_ids[:-1] + labels[:-1]
        assert tokenizer.bos_token_id not in input_ids + labels
        assert tokenizer.decode(input_ids[:-1]) == source
        assert tokenizer.decode(labels[:-1]) == target


def test_truncation_keeps_eos_and_padding_uses_pad(tokenizer):
    truncated = tokenizer(" ".join(GERMAN[:5]), truncation=True, max_length=8)["input_ids"]
    assert len(truncated) == 8
    assert truncated[-1] == tokenizer.eos_token_id
    padded = tokenizer([ENGLISH[0], ENGLISH[1]], padding=True)
    short, long = (padded["input_ids"][i] for i in (0, 1))
    assert len(short) == len(long)
    assert short[-1] == tokenizer.pad_token_id and padded["attention_mask"][0][-1] == 0


def test_literal_special_token_text_is_not_a_special_token(tokenizer):
    ids = tokenizer("a </s> b")["input_ids"]
    assert ids.count(tokenizer.eos_token_id) == 1


def test_vocab_size_is_honoured(corpus_files, tmp_path):
    for vocab_size in (350, 600):  # the corpus supports about 700 tokens at min_frequency=2
        tok = train_bpe_tokenizer(files=corpus_files, vocab_size=vocab_size)
        tok.save_pretrained(tmp_path / str(vocab_size))
        saved = json.loads((tmp_path / str(vocab_size) / "tokenizer.json").read_text(encoding="utf-8"))
        assert len(saved["model"]["vocab"]) == vocab_size
        assert len(tok) == -(-vocab_size // 8) * 8  # 350 -> 352: rounded up with filler tokens


def test_vocabulary_is_padded_with_unused_special_tokens(corpus_files, tmp_path):
    """`pad_to_multiple_of` (default 8, fairseq's dictionary padding): filler special tokens after every other id make
    `len(tokenizer)` a multiple; they change no id of any text, never come out of encoding (their own spelling is
    characters) and are dropped by `skip_special_tokens`; the padded folder loads with AutoTokenizer."""
    padded = train_bpe_tokenizer(files=corpus_files, vocab_size=443)
    unpadded = train_bpe_tokenizer(files=corpus_files, vocab_size=443, pad_to_multiple_of=1)
    assert (len(unpadded), len(padded)) == (443, 448)
    fillers = padded.convert_ids_to_tokens(list(range(443, 448)))
    assert fillers == [f"<madeupword{i:04d}>" for i in range(5)]
    assert unpadded.convert_ids_to_tokens(list(range(443))) == padded.convert_ids_to_tokens(list(range(443)))
    for text in ENGLISH + GERMAN + [" ".join(fillers), "<madeupword0000>"]:
        assert padded(text)["input_ids"] == unpadded(text)["input_ids"]
        assert max(padded(text)["input_ids"]) < 443
    ids = padded("Das Haus ist klein.")["input_ids"]
    assert padded.decode([*ids[:2], 445, *ids[2:], 447], skip_special_tokens=True) == "Das Haus ist klein."
    padded.save_pretrained(tmp_path / "padded")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "padded")
    assert len(loaded) == 448 and loaded.convert_ids_to_tokens(447) == "<madeupword0004>"
    assert loaded("Das Haus ist klein.")["input_ids"] == ids
    assert len(train_bpe_tokenizer(files=corpus_files, vocab_size=443, pad_to_multiple_of=100)) == 500
    many = train_bpe_tokenizer(files=corpus_files, vocab_size=443, pad_to_multiple_of=10_500)  # 10,057 fillers
    assert many.convert_ids_to_tokens(len(many) - 1) == "<madeupword10056>"
    assert first_tokens(many.backend_tokenizer, 400).get_vocab_size() == 400  # every filler recognised and cut
    assert len(train_bpe_tokenizer(files=corpus_files, vocab_size=440)) == 440  # already a multiple: no filler


def test_first_tokens_are_the_vocabulary_a_smaller_training_learns(corpus_files):
    """`first_tokens` (`vaswani prune --vocab_size`): the first ids of a trained BPE are, token for token, merge for
    merge and id for id, the tokenizer that training with that smaller vocab_size gives."""
    big = train_bpe_tokenizer(files=corpus_files, vocab_size=603).backend_tokenizer  # 603 + 5 fillers
    small = train_bpe_tokenizer(files=corpus_files, vocab_size=450, pad_to_multiple_of=1).backend_tokenizer
    cut = first_tokens(big, 450)  # the fillers go with the ids cut
    cut_state, small_state = json.loads(cut.to_str()), json.loads(small.to_str())
    assert cut_state["model"]["vocab"] == small_state["model"]["vocab"]
    assert cut_state["added_tokens"] == small_state["added_tokens"]
    assert cut_state["model"]["merges"] == small_state["model"]["merges"] and len(cut_state["model"]["merges"]) > 50
    assert cut.get_vocab_size() == 450 and cut.model.ignore_merges
    for text in ENGLISH + GERMAN + ["Unbekannte Wörter: Quizshow ☃"]:
        assert cut.encode(text).ids == small.encode(text).ids
        assert len(cut.encode(text).ids) >= len(big.encode(text).ids)
        assert cut.decode(cut.encode(text).ids) == big.decode(big.encode(text).ids)


def test_first_tokens_refuses_what_it_cannot_cut(corpus_files):
    trained = train_bpe_tokenizer(files=corpus_files, vocab_size=450, pad_to_multiple_of=1)
    tokenizer = trained.backend_tokenizer
    state = json.loads(tokenizer.to_str())
    first_merge = state["model"]["vocab"]["".join(state["model"]["merges"][0])]
    for size in (450, 451, first_merge):
        with pytest.raises(TokenizerError, match=f"vocab_size {size} must be smaller than the vocabulary .450. and "
                           f"above the {first_merge} tokens that come before the first merge"):  # fmt: skip
            first_tokens(tokenizer, size)
    assert first_tokens(tokenizer, first_merge + 1).get_vocab_size() == first_merge + 1
    masked = train_bpe_tokenizer(files=corpus_files, vocab_size=450, mask_token=True).backend_tokenizer  # + 5 fillers
    with pytest.raises(TokenizerError, match=r"would cut the added token\(s\) \['<mask>'\]: keep at least 451 ids"):
        first_tokens(masked, 400)
    swapped = json.loads(tokenizer.to_str())  # two merged tokens numbered against the order they were learned
    vocab, (a, b) = swapped["model"]["vocab"], ["".join(merge) for merge in swapped["model"]["merges"][5:7]]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    with pytest.raises(TokenizerError, match="not numbered in the order they were learned"):
        first_tokens(Tokenizer.from_str(json.dumps(swapped)), 400)
    with pytest.raises(TokenizerError, match="only a BPE vocabulary can be cut to its first tokens; this one is "
                       "WordLevel"):  # fmt: skip
        first_tokens(Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")), 1)


def test_iterator_and_dataset_sources_match_files(corpus_files):
    from datasets import Dataset

    from_files = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB)
    # Batches of sentences, and both sides of a translation column, give the same counts, hence the same merges.
    batches = [ENGLISH[i : i + 50] for i in range(0, len(ENGLISH), 50)] + [GERMAN]
    from_iterator = train_bpe_tokenizer(iterator=iter(batches), vocab_size=SMALL_VOCAB)
    dataset = Dataset.from_dict(
        {"translation": [{"en": en, "de": de} for en, de in zip(ENGLISH, GERMAN, strict=True)]}
    )
    from_dataset = train_bpe_tokenizer(dataset=dataset, source_lang="en", target_lang="de", vocab_size=SMALL_VOCAB)
    english_only = train_bpe_tokenizer(iterator=ENGLISH, vocab_size=SMALL_VOCAB)
    reference = from_files.backend_tokenizer.to_str()
    assert from_iterator.backend_tokenizer.to_str() == reference
    assert from_dataset.backend_tokenizer.to_str() == reference
    assert english_only.backend_tokenizer.to_str() != reference


def test_a_byte_order_mark_at_the_start_of_a_file_is_not_learned(corpus_files, tmp_path):
    """Notepad and PowerShell start a UTF-8 file with a byte-order mark: the same files without it, the same tokenizer
    (as `vaswani train` reads its data files)."""
    marked = []
    for path in corpus_files:
        marked.append(tmp_path / path.name)
        marked[-1].write_bytes("\ufeff".encode() + path.read_bytes())
    reference = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB).backend_tokenizer.to_str()
    assert train_bpe_tokenizer(files=marked, vocab_size=SMALL_VOCAB).backend_tokenizer.to_str() == reference


def test_a_utf16_file_is_named_as_such(tmp_path):
    path = tmp_path / "windows.txt"
    path.write_text("one two three\n", encoding="utf-16")  # with its byte-order mark, as PowerShell 5's `>` writes
    with pytest.raises(TokenizerTrainingError, match="UTF-16 byte-order mark: convert it to UTF-8, e.g. with `iconv"):
        train_bpe_tokenizer(files=[path], vocab_size=SMALL_VOCAB)


# --- saving, loading, determinism --------------------------------------------------------------------------------

LOAD_IN_FRESH_PROCESS = """
import importlib.util, json, sys
sys.path.extend(sys.argv[2:])  # site-packages, without running its .pth files (the editable install of this repo)
if importlib.util.find_spec("tokenization") is not None:
    sys.exit("tokenization is importable")
from transformers import AutoTokenizer, PreTrainedTokenizerFast
tok = AutoTokenizer.from_pretrained(sys.argv[1])
texts = json.loads(sys.stdin.read())
print(json.dumps({"is_fast": isinstance(tok, PreTrainedTokenizerFast), "ids": tok(texts)["input_ids"],
                  "pad": tok.pad_token_id, "eos": tok.eos_token_id}))
"""


def clean_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


@pytest.mark.slow
def test_autotokenizer_loads_folder_in_fresh_process_without_package(tokenizer, tmp_path):
    folder = tmp_path / "tokenizer"
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"

    texts = [*ENGLISH[:5], *GERMAN[:5], "  Ünïcödé 😀 日本 \t x"]
    command = [sys.executable, "-I", "-S", "-c", LOAD_IN_FRESH_PROCESS, str(folder), *site.getsitepackages()]
    result = subprocess.run(
        command, input=json.dumps(texts), capture_output=True, text=True, cwd=tmp_path, env=clean_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["is_fast"]
    assert loaded["ids"] == tokenizer(texts)["input_ids"]
    assert (loaded["pad"], loaded["eos"]) == (tokenizer.pad_token_id, tokenizer.eos_token_id)


def test_load_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    assert loaded("Das Haus ist klein.")["input_ids"] == tokenizer("Das Haus ist klein.")["input_ids"]
    with pytest.raises(ModelFolderError, match="no such tokenizer folder"):
        load_tokenizer(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFolderError, match="holds no tokenizer"):
        load_tokenizer(tmp_path / "empty")


@pytest.mark.parametrize("saved_class", ["PreTrainedTokenizerFast", "TokenizersBackend"])
@pytest.mark.parametrize(("layout", "mask_token"), [("paper", False), ("fairseq", False), ("paper", True)])
def test_load_tokenizer_gives_what_autotokenizer_gives(corpus_files, tmp_path, layout, mask_token, saved_class):
    """load_tokenizer loads a plain fast tokenizer without AutoTokenizer (which imports PyTorch): the same class,
    special tokens, settings, ids and decoded text as AutoTokenizer, under the class name we save and the one
    transformers 5 saves."""
    tok = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB, special_tokens_layout=layout,
                              mask_token=mask_token, model_max_length=64)  # fmt: skip
    folder = tmp_path / "tok"
    tok.save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": saved_class}))
    ours, auto = load_tokenizer(folder), AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert type(ours) is type(auto)
    assert ours.special_tokens_map == auto.special_tokens_map and ours.all_special_ids == auto.all_special_ids
    for name in ("model_max_length", "padding_side", "truncation_side", "clean_up_tokenization_spaces"):
        assert getattr(ours, name) == getattr(auto, name), name
    assert ours.get_vocab() == auto.get_vocab()
    texts = [*ENGLISH[:4], *GERMAN[:4], "  Ünïcödé 😀 日本 \t x", "<pad> </s> literal", " ".join(GERMAN) * 3]
    kwargs = {"text_target": texts[::-1], "padding": True, "truncation": True}
    assert ours(texts, **kwargs).data == auto(texts, **kwargs).data
    ids = auto(texts)["input_ids"]
    for skip in (True, False):
        assert ours.batch_decode(ids, skip_special_tokens=skip) == auto.batch_decode(ids, skip_special_tokens=skip)
    assert ours.convert_ids_to_tokens(ids[0]) == auto.convert_ids_to_tokens(ids[0])


# --- LightTokenizer: a CTranslate2 export decodes without transformers --------------------------------------------


def saved_tokenizer(corpus_files, folder: Path, config: dict | None = None, **options) -> Path:
    """A trained tokenizer saved in `folder`, tokenizer_config.json updated with `config`."""
    train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB, model_max_length=64, **options).save_pretrained(
        folder
    )
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text(encoding="utf-8")), **(config or {})}))
    return folder


def assert_light_equals_transformers(light: LightTokenizer, full, texts: list[str]) -> None:
    """Everything translating and scoring ask of a tokenizer gives the same answer from both."""
    for add in (True, False):
        assert light(texts, add_special_tokens=add)["input_ids"] == full(texts, add_special_tokens=add)["input_ids"]
        assert (
            light(texts[0], add_special_tokens=add)["input_ids"] == full(texts[0], add_special_tokens=add)["input_ids"]
        )
        for target in (texts, texts[0]):  # the target side (scored references, prefixes): input_ids alone, labels
            ours, theirs = (
                light(text_target=target, add_special_tokens=add),
                full(text_target=target, add_special_tokens=add),
            )
            assert ours["input_ids"] == theirs["input_ids"]
            ours, theirs = light(target, text_target=target[::-1]), full(target, text_target=target[::-1])
            assert (ours["input_ids"], ours["labels"]) == (theirs["input_ids"], theirs["labels"])
    ids = [*full(texts)["input_ids"], list(range(len(full)))]  # every id once, fillers and special tokens included
    for skip in (True, False):
        assert [light.decode(i, skip_special_tokens=skip) for i in ids] == [
            full.decode(i, skip_special_tokens=skip) for i in ids
        ]
        assert light.convert_ids_to_tokens(ids[-1], skip_special_tokens=skip) == full.convert_ids_to_tokens(
            ids[-1], skip_special_tokens=skip
        )
    tokens = [*full.convert_ids_to_tokens(ids[-1]), "no-such-token"]
    assert light.convert_tokens_to_ids(tokens) == full.convert_tokens_to_ids(tokens)
    assert light.convert_ids_to_tokens(5) == full.convert_ids_to_tokens(5)
    assert light.convert_tokens_to_ids("no-such-token") == full.convert_tokens_to_ids("no-such-token")
    for name in SPECIAL_TOKEN_NAMES:
        assert (getattr(light, name), getattr(light, f"{name}_id")) == (
            getattr(full, name), getattr(full, f"{name}_id"),
        ), name  # fmt: skip
    assert set(light.all_special_ids) == set(full.all_special_ids) and len(light) == len(full)
    assert light.get_vocab() == full.get_vocab()
    assert light._full is None  # all of it answered by `tokenizers` alone, transformers' tokenizer never loaded


@pytest.mark.parametrize("saved_class", ["PreTrainedTokenizerFast", "TokenizersBackend"])
@pytest.mark.parametrize(("layout", "mask_token"), [("paper", False), ("fairseq", False), ("paper", True)])
def test_the_light_tokenizer_encodes_and_decodes_as_transformers_does(
    corpus_files, tmp_path, layout, mask_token, saved_class
):
    """`load_tokenizer(light=True)` reads our tokenizers with `tokenizers` alone (no transformers import): the ids,
    texts, tokens and special tokens of `PreTrainedTokenizerFast`, with text that spells special tokens, characters
    outside the corpus and a vocabulary padded with filler tokens; what it does not have comes from transformers."""
    folder = saved_tokenizer(corpus_files, tmp_path / "tok", {"tokenizer_class": saved_class},
                             special_tokens_layout=layout, mask_token=mask_token)  # fmt: skip
    light, full = load_tokenizer(folder, light=True), load_tokenizer(folder)
    assert type(light) is LightTokenizer and isinstance(full, PreTrainedTokenizerFast)
    texts = [*ENGLISH[:4], *GERMAN[:4], "  Ünïcödé 😀 日本 \t x", "<pad> </s> <s> <unk> <mask> literal", "",
             " ".join(GERMAN) * 3, "<madeupword0001>"]  # fmt: skip
    assert_light_equals_transformers(light, full, texts)
    assert light.backend_tokenizer.to_str() == full.backend_tokenizer.to_str()
    ids = full(texts)["input_ids"]
    assert light.batch_decode(ids, skip_special_tokens=True) == full.batch_decode(ids, skip_special_tokens=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40) | st.sampled_from(
    ["</s>", "<pad>", "<s>", "<unk>", " </s> ", "\u2581", "\u2581\u2581x", "a\u0301", "ﬁ", "\x00"]), min_size=1,
    max_size=4))  # fmt: skip
def test_the_light_tokenizer_agrees_with_transformers_on_any_text(light_and_full, texts):
    light, full = light_and_full
    assert light(texts)["input_ids"] == full(texts)["input_ids"]
    for ids in full(texts)["input_ids"]:
        assert light.decode(ids, skip_special_tokens=True) == full.decode(ids, skip_special_tokens=True)
        assert light.convert_ids_to_tokens(ids) == full.convert_ids_to_tokens(ids)


@pytest.fixture(scope="module")
def light_and_full(corpus_files, tmp_path_factory):
    folder = saved_tokenizer(corpus_files, tmp_path_factory.mktemp("light") / "tok")
    return load_tokenizer(folder, light=True), load_tokenizer(folder)


@pytest.mark.parametrize(
    "config",
    [
        {"add_bos_token": True},  # an entry transformers may act on as it loads (a post-processor rewritten)
        {"add_prefix_space": True},
        {"clean_up_tokenization_spaces": True},  # decoding's clean-up
        {"mask_token": "<mask>"},  # special tokens tokenizer.json lacks: transformers adds them
        {"extra_special_tokens": ["<x>"]},
        {"split_special_tokens": False},  # read, not a reason to fall back: "</s>" typed is EOS then
    ],
)
def test_a_tokenizer_the_light_one_would_read_differently_loads_with_transformers(corpus_files, tmp_path, config):
    """Where tokenizer_config.json asks for what `LightTokenizer` does not do, `load_tokenizer(light=True)` gives
    transformers' tokenizer (with a special token the file lacks, one more token than the file has)."""
    folder = saved_tokenizer(corpus_files, tmp_path / "tok", config)
    loaded, full = load_tokenizer(folder, light=True), load_tokenizer(folder)
    if "split_special_tokens" in config:
        assert type(loaded) is LightTokenizer
        assert_light_equals_transformers(loaded, full, ["Das Haus ist klein. </s>", "<pad>"])
        assert loaded("Das Haus ist klein. </s>")["input_ids"].count(loaded.eos_token_id) == 2
        return
    assert isinstance(loaded, PreTrainedTokenizerFast)
    assert len(loaded) == SMALL_VOCAB + ("mask_token" in config or "extra_special_tokens" in config)


def test_truncation_and_padding_saved_in_tokenizer_json_stay_off_as_in_transformers(corpus_files, tmp_path):
    """transformers turns off the truncation and padding a tokenizer.json may hold unless a call asks for them; so
    does `LightTokenizer`."""
    folder = saved_tokenizer(corpus_files, tmp_path / "tok")
    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    backend.enable_truncation(3)
    backend.enable_padding(length=50, pad_id=0, pad_token="<pad>")
    backend.save(str(folder / "tokenizer.json"))
    light = load_tokenizer(folder, light=True)
    assert type(light) is LightTokenizer and len(light(ENGLISH[0])["input_ids"]) > 3
    assert_light_equals_transformers(light, load_tokenizer(folder), ENGLISH[:3])


def test_a_damaged_tokenizer_json_is_the_same_clear_error_with_the_light_tokenizer(corpus_files, tmp_path):
    folder = saved_tokenizer(corpus_files, tmp_path / "tok")
    (folder / "tokenizer.json").write_text('{"model": 5}')
    for light in (True, False):
        with pytest.raises(ModelFolderError, match=r"tokenizer.json cannot be loaded \(\w+: .*\): save it again"):
            load_tokenizer(folder, light=light)


def test_a_tokenizer_without_a_post_processor_loads_with_transformers(corpus_files, tmp_path):
    folder = saved_tokenizer(corpus_files, tmp_path / "tok")
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    (folder / "tokenizer.json").write_text(json.dumps({**data, "post_processor": None}))
    assert isinstance(load_tokenizer(folder, light=True), PreTrainedTokenizerFast)


def run_cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**clean_env(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-m", "tokenization", "train", *args], capture_output=True, text=True, env=env, cwd=tmp_path
    )


@pytest.mark.slow
def test_training_is_deterministic_across_processes(corpus_files, tmp_path):
    first = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB)
    second = train_bpe_tokenizer(files=corpus_files, vocab_size=SMALL_VOCAB)
    first.save_pretrained(tmp_path / "first")
    second.save_pretrained(tmp_path / "second")
    # A separate process has other hash seeds and thread timings.
    result = run_cli(
        "--files",
        *map(str, corpus_files),
        "--vocab_size",
        str(SMALL_VOCAB),
        "--output_dir",
        "third",
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    reference = (tmp_path / "first" / "tokenizer.json").read_bytes()
    assert (tmp_path / "second" / "tokenizer.json").read_bytes() == reference
    assert (tmp_path / "third" / "tokenizer.json").read_bytes() == reference


def test_pair_files_are_read_as_both_sides_of_their_pairs(corpus_files, tmp_path, capsys):
    """`vaswani tokenizer --files` takes the pair files `--train_file` takes: a .jsonl or .tsv of the corpus gives
    the tokenizer its two plain text files give (not one learned on JSON syntax or TABs); a .jsonl's languages are
    its "translation" keys, --source_lang/--target_lang choose two of more; mistakes are one-line errors."""
    from tokenization.__main__ import main

    english, german = (path.read_text(encoding="utf-8").splitlines() for path in corpus_files)
    pairs = list(zip(english, german, strict=True))
    jsonl, tsv, three = tmp_path / "train.jsonl", tmp_path / "train.tsv", tmp_path / "three.jsonl"
    jsonl.write_text("".join(json.dumps({"translation": {"en": e, "de": d}}) + "\n" for e, d in pairs))
    tsv.write_text("en\tde\n" + "".join(f"{e}\t{d}\n" for e, d in pairs), encoding="utf-8")
    three.write_text("".join(json.dumps({"translation": {"en": e, "de": d, "fr": "x y z"}}) + "\n" for e, d in pairs))

    def train(name: str, *files: Path, options: tuple[str, ...] = ()) -> int:
        return main(["train", "--files", *map(str, files), "--vocab_size", "400", *options, "--output_dir",
                     str(tmp_path / name)])  # fmt: skip

    assert train("plain", *corpus_files) == 0
    reference = (tmp_path / "plain" / "tokenizer.json").read_bytes()
    assert train("jsonl", jsonl) == train("tsv", tsv, options=("--source_lang", "en", "--target_lang", "de")) == 0
    assert train("two-of-three", three, options=("--source_lang", "en", "--target_lang", "de")) == 0
    for name in ("jsonl", "tsv", "two-of-three"):
        assert (tmp_path / name / "tokenizer.json").read_bytes() == reference, name
    capsys.readouterr()
    for files, options, message in [
        ((three,), (), "has the keys ['de', 'en', 'fr'], not two languages: pass --source_lang and --target_lang"),
        ((jsonl,), ("--source_lang", "en"), "--source_lang and --target_lang go together"),
        ((jsonl, tmp_path / "missing.en"), (), "missing.en not found"),
    ]:
        assert train("refused", *files, options=options) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "refused").exists()


# --- clear errors ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("empty corpus", "corpus is empty"),
        ("missing file", "not found"),
        ("tiny vocabulary", "smaller than the alphabet"),
    ],
)
def test_cli_reports_user_errors_without_traceback(corpus_files, tmp_path, case, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    arguments = {
        "empty corpus": ["--files", str(empty)],
        "missing file": ["--files", str(corpus_files[0]), str(tmp_path / "missing.de")],
        "tiny vocabulary": ["--files", *map(str, corpus_files), "--vocab_size", "280"],
    }[case]
    result = run_cli(*arguments, "--output_dir", str(tmp_path / "out"), tmp_path=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of files, iterator or dataset"),
        ({"files": ["a.txt"], "iterator": ["a"]}, "exactly one of files, iterator or dataset"),
        ({"iterator": ["a b c"], "special_tokens_layout": "t5"}, "unknown special_tokens_layout"),
        ({"iterator": ["a b c"], "normalization": "NFKX"}, "unknown normalization"),
        ({"iterator": ["a b c"], "vocab_size": 100}, "too small"),
        ({"iterator": ["", "   "]}, "corpus is empty"),
        ({"iterator": [1, 2]}, "strings or lists of strings"),
        ({"iterator": ["a b c"], "ignore_merges": "yes"}, "must be True or False"),
        ({"iterator": ["a b c"], "pad_to_multiple_of": 0}, "pad_to_multiple_of=0 must be a whole number of at least"),
        ({"iterator": ["a b c"], "pad_to_multiple_of": True}, "pad_to_multiple_of=True must be a whole number"),
        ({"iterator": ["a b c"], "pad_to_multiple_of": 2.5}, "pad_to_multiple_of=2.5 must be a whole number"),
    ],
)
def test_training_errors_name_the_problem(kwargs, message):
    with pytest.raises(TokenizerTrainingError, match=message):
        train_bpe_tokenizer(**kwargs)
    assert issubclass(TokenizerTrainingError, ValueError)


def test_dataset_errors_name_the_problem():
    from datasets import Dataset

    three_languages = Dataset.from_dict({"translation": [{"en": "a", "de": "b", "fr": "c"}]})
    with pytest.raises(TokenizerTrainingError, match="source_lang and target_lang"):
        train_bpe_tokenizer(dataset=three_languages)
    with pytest.raises(TokenizerTrainingError, match="no 'translation' column"):
        train_bpe_tokenizer(dataset=Dataset.from_dict({"text": ["a"]}))
