"""Tests of reading parallel data: every file format, the demo and named datasets, empty pairs, carving a validation
split, and a clear `DataError` for each kind of bad input.

Expected pairs, line numbers and byte offsets are written out or computed here from the bytes written to disk.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import datasets
import pytest

from vaswani.data.loading import DataReport, load_translation_splits
from vaswani.errors import DataError

PAIRS = [
    ("Hello world.", "Hallo Welt."),
    ("The café is open.", "Das Café ist geöffnet."),
    ("Three  spaces\tand a tab inside.", "Drei  Leerzeichen\tund ein Tab."),
    ("Last one.", "Der letzte."),
]
TSV_PAIRS = [(en.replace("\t", " "), de.replace("\t", " ")) for en, de in PAIRS]  # a TSV cannot hold inner TABs


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def write_jsonl(path: Path, pairs, source_lang="en", target_lang="de") -> Path:
    lines = [json.dumps({"translation": {source_lang: s, target_lang: t}}, ensure_ascii=False) for s, t in pairs]
    return write(path, "".join(line + "\n" for line in lines))


def write_tsv(path: Path, pairs) -> Path:
    return write(path, "".join(f"{s}\t{t}\n" for s, t in pairs))


def write_aligned(prefix: Path, pairs, source_lang="en", target_lang="de") -> Path:
    write(Path(f"{prefix}.{source_lang}"), "".join(s + "\n" for s, _ in pairs))
    write(Path(f"{prefix}.{target_lang}"), "".join(t + "\n" for _, t in pairs))
    return prefix


def load(tmp_path: Path, **kwargs) -> tuple[datasets.DatasetDict, DataReport]:
    return load_translation_splits(cache_dir=tmp_path / "cache", **kwargs)


def pairs_of(dataset: datasets.Dataset, source_lang="en", target_lang="de") -> list[tuple[str, str]]:
    return [(row[source_lang], row[target_lang]) for row in dataset["translation"]]


def assert_translation_layout(splits: datasets.DatasetDict, source_lang="en", target_lang="de"):
    for dataset in splits.values():
        assert dataset.column_names == ["translation"]
        assert all(set(row) == {source_lang, target_lang} for row in dataset["translation"])


# ---------------------------------------------------------------------------------------------------------------------
# Formats
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_json_lines(tmp_path, suffix):
    rows = [{"id": k, "translation": {"en": s, "de": t, "fr": "ignoré"}} for k, (s, t) in enumerate(PAIRS)]
    path = write(tmp_path / f"train{suffix}", "\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n")
    splits, report = load(tmp_path, train_file=path, validation_size=0)
    assert list(splits) == ["train"]
    assert pairs_of(splits["train"]) == PAIRS
    assert_translation_layout(splits)
    assert (report.splits["train"].pairs_read, report.splits["train"].pairs_kept) == (4, 4)
    assert report.splits["train"].source == str(path)


def test_tsv(tmp_path):
    path = write_tsv(tmp_path / "train.tsv", TSV_PAIRS)
    splits, _ = load(tmp_path, train_file=path, validation_size=0)
    assert pairs_of(splits["train"]) == TSV_PAIRS


def test_aligned_prefix(tmp_path):
    prefix = write_aligned(tmp_path / "corpus" / "train", PAIRS)
    splits, report = load(tmp_path, train_file=str(prefix), validation_size=0)
    assert pairs_of(splits["train"]) == PAIRS
    assert_translation_layout(splits)
    assert report.splits["train"].source == f"{prefix}.en + {prefix}.de"


def test_other_direction_and_languages(tmp_path):
    prefix = write_aligned(tmp_path / "train", PAIRS, source_lang="fr", target_lang="it")
    splits, _ = load(tmp_path, train_file=prefix, source_lang="it", target_lang="fr", validation_size=0)
    assert pairs_of(splits["train"], "fr", "it") == PAIRS
    assert_translation_layout(splits, "it", "fr")


def test_line_endings_whitespace_and_byte_order_mark(tmp_path):
    write(tmp_path / "train.en", "\ufeff  leading\r\ntrailing  \r\nmiddle\rcarriage\r\nno newline at the end")
    write(tmp_path / "train.de", "  führend\ntrailing de  \r\nMitte\n\tTab am Ende\t")
    splits, _ = load(tmp_path, train_file=tmp_path / "train", validation_size=0)
    assert pairs_of(splits["train"]) == [
        ("  leading", "  führend"),
        ("trailing  ", "trailing de  "),
        ("middle\rcarriage", "Mitte"),
        ("no newline at the end", "\tTab am Ende\t"),
    ]


def test_crlf_tsv_and_jsonl(tmp_path):
    tsv = write(tmp_path / "train.tsv", "one\teins\r\ntwo\tzwei\r\n")
    jsonl = write(tmp_path / "valid.jsonl", '{"translation": {"en": "three", "de": "drei"}}\r\n')
    splits, _ = load(tmp_path, train_file=tsv, validation_file=jsonl)
    assert pairs_of(splits["train"]) == [("one", "eins"), ("two", "zwei")]
    assert pairs_of(splits["validation"]) == [("three", "drei")]


def test_three_splits_in_three_formats(tmp_path):
    splits, report = load(
        tmp_path,
        train_file=write_aligned(tmp_path / "train", PAIRS),
        validation_file=write_jsonl(tmp_path / "valid.jsonl", PAIRS[:2]),
        test_file=write_tsv(tmp_path / "test.tsv", TSV_PAIRS[2:]),
    )
    assert list(splits) == ["train", "validation", "test"]
    assert pairs_of(splits["validation"]) == PAIRS[:2]
    assert pairs_of(splits["test"]) == TSV_PAIRS[2:]
    assert report.notes == []
    assert [line.split(":")[0] for line in report.summary().splitlines()] == ["train", "validation", "test"]


def test_edited_file_is_read_again(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", PAIRS[:1])
    first, _ = load(tmp_path, train_file=path, validation_size=0)
    write_jsonl(path, PAIRS[1:])
    os.utime(path, ns=(1, 1))  # a different modification time even on a coarse file system
    second, _ = load(tmp_path, train_file=path, validation_size=0)
    assert pairs_of(first["train"]) == PAIRS[:1]
    assert pairs_of(second["train"]) == PAIRS[1:]


# ---------------------------------------------------------------------------------------------------------------------
# The demo dataset and datasets by name
# ---------------------------------------------------------------------------------------------------------------------


def test_demo_dataset(tmp_path):
    splits, report = load(tmp_path, dataset_name="demo", source_lang="de", target_lang="en")
    assert {name: len(split) for name, split in splits.items()} == {"train": 20000, "validation": 500, "test": 1000}
    assert_translation_layout(splits, "de", "en")
    assert "dataset 'demo'" in report.splits["train"].source
    with pytest.raises(DataError, match="--dataset_name demo: .*English-German"):
        load(tmp_path, dataset_name="demo", source_lang="en", target_lang="fr")


def test_file_replaces_a_split_of_the_dataset(tmp_path):
    splits, report = load(tmp_path, dataset_name="demo", test_file=write_tsv(tmp_path / "test.tsv", TSV_PAIRS))
    assert pairs_of(splits["test"]) == TSV_PAIRS
    assert len(splits["train"]) == 20000
    assert report.splits["test"].source.endswith("test.tsv")


@pytest.fixture
def hub(monkeypatch):
    """Replace `datasets.load_dataset` by a fake Hub holding `hub.datasets[name]`; records the calls."""

    class FakeHub:
        datasets: dict[str, datasets.DatasetDict] = {}
        calls: list[tuple] = []

        def load_dataset(self, name, config_name=None, **kwargs):
            self.calls.append((name, config_name, kwargs))
            if name not in self.datasets:
                raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)")
            return self.datasets[name]

    fake = FakeHub()
    monkeypatch.setattr(datasets, "load_dataset", fake.load_dataset)
    return fake


def test_named_dataset_reduced_to_the_pair_with_empty_rows_dropped(tmp_path, hub):
    rows = [{"de": f"Satz {k}", "en": f"sentence {k}", "fr": f"phrase {k}"} for k in range(30)]
    rows[3]["en"] = " "
    rows[7]["de"] = None
    hub.datasets["someone/corpus"] = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"id": list(range(30)), "translation": rows})}
    )
    splits, report = load(tmp_path, dataset_name="someone/corpus", dataset_config_name="de-en", validation_size=4)
    assert hub.calls[0][:2] == ("someone/corpus", "de-en")
    assert_translation_layout(splits)
    kept = [(f"sentence {k}", f"Satz {k}") for k in range(30) if k not in (3, 7)]
    assert sorted(pairs_of(splits["train"]) + pairs_of(splits["validation"])) == sorted(kept)
    train = report.splits["train"]
    assert (train.pairs_read, train.pairs_skipped, train.skipped_examples) == (30, 2, ["row 3", "row 7"])
    assert (train.pairs_kept, train.moved_to_validation, report.splits["validation"].pairs_kept) == (24, 4, 4)


def test_named_dataset_that_cannot_be_loaded(tmp_path, hub):
    with pytest.raises(
        DataError, match=r"could not load dataset 'nobody/nothing' \(xx\).*Couldn't reach.*--train_file"
    ):
        load(tmp_path, dataset_name="nobody/nothing", dataset_config_name="xx")


def test_named_dataset_without_translation_column(tmp_path, hub):
    hub.datasets["flat"] = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"en": ["a"], "de": ["b"]})})
    with pytest.raises(DataError, match=r"no 'translation' column \(columns: \['en', 'de'\]\).*nested"):
        load(tmp_path, dataset_name="flat")


def test_named_dataset_without_the_language(tmp_path, hub):
    rows = [{"en": "a", "fr": "b"}]
    hub.datasets["enfr"] = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"translation": rows})})
    with pytest.raises(DataError, match=r"no 'de' \(languages: \['en', 'fr'\]\)"):
        load(tmp_path, dataset_name="enfr")


def test_named_dataset_without_train_split(tmp_path, hub):
    test = datasets.Dataset.from_dict({"translation": [{"en": "a", "de": "b"}]})
    hub.datasets["testonly"] = datasets.DatasetDict({"test": test})
    with pytest.raises(DataError, match=r"no 'train' split \(splits: \['test'\]\)"):
        load(tmp_path, dataset_name="testonly")


def test_dataset_not_loaded_when_files_cover_every_split(tmp_path, hub):
    path = write_jsonl(tmp_path / "all.jsonl", PAIRS)
    _, report = load(tmp_path, dataset_name="x", train_file=path, validation_file=path, test_file=path)
    assert hub.calls == []
    assert any("not used" in note for note in report.notes)


# ---------------------------------------------------------------------------------------------------------------------
# Empty pairs and the validation split
# ---------------------------------------------------------------------------------------------------------------------


def test_empty_pairs_are_skipped_and_reported(tmp_path):
    english = ["one", "", "three", "four", "five", "   ", "seven", "", "nine", "ten", ""]
    german = ["eins", "zwei", "drei", " \t", "fünf", "sechs", "sieben", "", "neun", "zehn", "elf"]
    prefix = write_aligned(tmp_path / "train", list(zip(english, german, strict=True)))
    tsv = write(tmp_path / "valid.tsv", "a\tb\n\n\t\nc\t \n")
    jsonl = write(
        tmp_path / "test.jsonl",
        '{"translation": {"en": "x", "de": null}}\n\n{"translation": {"en": "y", "de": "z"}}\n',
    )
    splits, report = load(tmp_path, train_file=prefix, validation_file=tsv, test_file=jsonl)
    assert pairs_of(splits["train"]) == [
        (e, g) for e, g in zip(english, german, strict=True) if e.strip() and g.strip()
    ]
    train = report.splits["train"]
    assert (train.pairs_read, train.pairs_kept, train.pairs_skipped) == (11, 6, 5)
    # Up to five examples, each naming the file whose side is empty.
    assert train.skipped_examples == ["train.en:2", "train.de:4", "train.en:6", "train.en:8", "train.en:11"]
    assert pairs_of(splits["validation"]) == [("a", "b")]
    assert report.splits["validation"].skipped_examples == ["valid.tsv:2", "valid.tsv:3", "valid.tsv:4"]
    assert pairs_of(splits["test"]) == [("y", "z")]
    assert report.splits["test"].skipped_examples == ["test.jsonl:1", "test.jsonl:2"]
    summary = report.summary()
    assert "train: 6 pairs" in summary and "5 skipped because a side is empty" in summary


def test_six_empty_pairs_keep_five_examples(tmp_path):
    path = write(tmp_path / "train.tsv", "a\tb\n" + "\t\n" * 6)
    _, report = load(tmp_path, train_file=path, validation_size=0)
    assert report.splits["train"].pairs_skipped == 6
    assert len(report.splits["train"].skipped_examples) == 5
    assert ", ...)" in report.summary()


NO_PAIR_FIX = ": give at least one pair in which both sides have text."


@pytest.mark.parametrize(("content", "problem"), [
    ("", "is empty"), ("\t\n", "has only empty pairs (1 line)"), ("\t\n \t \n", "has only empty pairs (2 lines)"),
])  # fmt: skip
def test_split_without_any_pair_is_an_error(tmp_path, content, problem):
    path = write(tmp_path / "train.tsv", content)
    with pytest.raises(DataError) as error:
        load(tmp_path, train_file=path)
    assert str(error.value) == f"--train_file: {path} {problem}{NO_PAIR_FIX}"


@pytest.mark.parametrize(("rows", "problem"), [
    ([], "is empty"), ([{"en": " ", "de": "Satz"}], "has only empty pairs (1 row)"),
    ([{"en": "a", "de": None}, {"en": "", "de": ""}], "has only empty pairs (2 rows)"),
])  # fmt: skip
def test_named_dataset_split_without_any_pair_is_an_error_in_the_files_words(tmp_path, hub, rows, problem):
    translation = datasets.Features({"translation": {"en": datasets.Value("string"), "de": datasets.Value("string")}})
    hub.datasets["someone/empty"] = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"translation": rows}, features=translation)}
    )
    with pytest.raises(DataError) as error:
        load(tmp_path, dataset_name="someone/empty", validation_size=0)
    assert str(error.value).endswith(f" {problem}{NO_PAIR_FIX}") and "someone/empty" in str(error.value)


def test_validation_carved_out_of_train(tmp_path):
    all_pairs = [(f"sentence {k}", f"Satz {k}") for k in range(200)]
    path = write_tsv(tmp_path / "train.tsv", all_pairs)
    splits, report = load(tmp_path, train_file=path, validation_size=30, seed=1)
    train, validation = pairs_of(splits["train"]), pairs_of(splits["validation"])
    assert (len(train), len(validation)) == (170, 30)
    assert set(train).isdisjoint(validation)
    assert sorted(train + validation) == sorted(all_pairs)
    assert train == [pair for pair in all_pairs if pair in set(train)]  # file order kept
    assert report.splits["train"].moved_to_validation == 30
    assert any("set aside 30 pairs of the training data for validation" in note for note in report.notes)

    again, _ = load(tmp_path, train_file=path, validation_size=30, seed=1)
    assert pairs_of(again["validation"]) == validation
    other_seed, _ = load(tmp_path, train_file=path, validation_size=30, seed=2)
    assert pairs_of(other_seed["validation"]) != validation


def test_validation_size_zero_and_too_large(tmp_path):
    path = write_tsv(tmp_path / "train.tsv", TSV_PAIRS)
    with pytest.raises(DataError, match="only 4.*--validation_file.*--validation_size"):
        load(tmp_path, train_file=path, validation_size=4)
    assert list((tmp_path / "cache").rglob("*.arrow")) == []  # found out before building anything
    splits, _ = load(tmp_path, train_file=path, validation_size=0)
    assert list(splits) == ["train"]
    with pytest.raises(DataError, match="validation_size"):
        load(tmp_path, train_file=path, validation_size=-1)


# ---------------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------------


def test_missing_files_of_every_split_listed_together(tmp_path):
    with pytest.raises(DataError) as error:
        load(tmp_path, train_file=tmp_path / "train.jsonl", test_file=tmp_path / "test.tsv")
    message = str(error.value)
    assert f"--train_file: file not found: {tmp_path / 'train.jsonl'}" in message
    assert f"--test_file: file not found: {tmp_path / 'test.tsv'}" in message


def test_existence_is_checked_before_content(tmp_path):
    train = write(tmp_path / "train.tsv", b"caf\xe9\tCaf\xe9\n")
    with pytest.raises(DataError, match="--validation_file: file not found") as error:
        load(tmp_path, train_file=train, validation_file=tmp_path / "valid.jsonl")
    assert "UTF-8" not in str(error.value)


def test_nothing_is_built_before_every_file_is_checked(tmp_path):
    train = write_tsv(tmp_path / "train.tsv", TSV_PAIRS)
    test = write(tmp_path / "test.tsv", "good\tgut\nbad line\n")
    with pytest.raises(DataError, match="test.tsv line 2"):
        load(tmp_path, train_file=train, test_file=test)
    assert list((tmp_path / "cache").rglob("*.arrow")) == []


def test_prefix_with_one_side_missing(tmp_path):
    write(tmp_path / "train.en", "hello\n")
    with pytest.raises(DataError) as error:
        load(tmp_path, train_file=tmp_path / "train")
    message = str(error.value)
    assert f"{tmp_path / 'train.de'} not found ({tmp_path / 'train.en'} exists)" in message
    assert "PATH.en and PATH.de" in message


def test_prefix_with_both_sides_missing(tmp_path):
    with pytest.raises(DataError, match=r"train\.en and .*train\.de not found"):
        load(tmp_path, train_file=tmp_path / "train")


def test_unknown_extension(tmp_path):
    path = write(tmp_path / "train.csv", "hello,hallo\n")
    with pytest.raises(DataError, match=r"train\.csv exists, but \.csv is not a known format"):
        load(tmp_path, train_file=path)


def test_language_file_given_instead_of_prefix(tmp_path):
    prefix = write_aligned(tmp_path / "train", PAIRS)
    with pytest.raises(DataError, match=f"without the language suffix: --train_file {prefix}$"):
        load(tmp_path, train_file=f"{prefix}.de")


def test_aligned_files_with_different_line_counts(tmp_path):
    write(tmp_path / "train.en", "a\nb\nc\n")
    write(tmp_path / "train.de", "a\nb")
    with pytest.raises(DataError) as error:
        load(tmp_path, train_file=tmp_path / "train")
    assert f"{tmp_path / 'train.en'} has 3 lines but {tmp_path / 'train.de'} has 2" in str(error.value)
    assert "aligned line by line" in str(error.value)


BAD_BYTES = "caf\xe9 au lait".encode("latin-1")


@pytest.mark.parametrize(
    ("name", "good", "bad_line"),
    [
        ("train.tsv", b"one\teins\ntwo\tzwei\n", BAD_BYTES + b"\tMilchkaffee\n"),
        ("train.jsonl", b'{"translation": {"en": "a", "de": "b"}}\n' * 2, b'{"translation": {"en": "' + BAD_BYTES),
        ("train.de", "one\ntwo ö\n".encode(), BAD_BYTES + b"\n"),
    ],
)
def test_bytes_that_are_not_utf8(tmp_path, name, good, bad_line):
    path = write(tmp_path / name, good + bad_line)
    if name == "train.de":
        write(tmp_path / "train.en", "one\ntwo\nthree\n")
    offset = len(good) + bad_line.index(b"\xe9")
    train_file = tmp_path / "train" if name == "train.de" else path
    with pytest.raises(DataError) as error:
        load(tmp_path, train_file=train_file)
    message = str(error.value)
    assert f"{path} line 3: not UTF-8 (byte offset {offset} in the file, bytes e9" in message
    assert "iconv -f latin1 -t utf-8" in message


@pytest.mark.parametrize("name", ["train.tsv", "train.jsonl", "train.en"])
def test_a_utf16_file_is_named_as_such(tmp_path, name):
    """What Windows PowerShell 5's `>` writes: UTF-16 with its byte-order mark; the message says how to convert it."""
    text = '{"translation": {"en": "one", "de": "eins"}}\n' if name == "train.jsonl" else "one\teins\n"
    path = write(tmp_path / name, text.encode("utf-16"))  # Python's UTF-16 starts with the byte-order mark
    if name == "train.en":
        write(tmp_path / "train.de", "eins\n")
    with pytest.raises(DataError) as error:
        load(tmp_path, train_file=tmp_path / "train" if name == "train.en" else path)
    message = str(error.value)
    assert f"{path} line 1: not UTF-8 (byte offset 0 in the file, bytes ff" in message
    assert "UTF-16 byte-order mark" in message and "iconv -f utf-16 -t utf-8" in message


@pytest.mark.parametrize(("line", "found"), [("no tab here", "none"), ("one\ttwo\tthree", "2")])
def test_bad_tsv_line(tmp_path, line, found):
    path = write(tmp_path / "train.tsv", f"fine\tgut\n{line}\n")
    with pytest.raises(DataError, match=f"train.tsv line 2: expected exactly one TAB .*found {found}"):
        load(tmp_path, train_file=path)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"translation": {"en": "a", "de": "b"}', r"line 2: not valid JSON"),
        ('["a", "b"]', r"line 2: expected a JSON object, found an array"),
        ('{"en": "a", "de": "b"}', r"""line 2: no "translation" key \(keys found: \['de', 'en'\]\).*top level"""),
        (
            '{"translation": {"en": "a", "fr": "b"}}',
            r"""line 2: "translation" has no "de" key \(keys found: \['en', 'fr'\]\)""",
        ),
        ('{"translation": "a b"}', r'line 2: "translation" is a string'),
        ('{"translation": {"en": "a", "de": 3}}', r'line 2: the "de" text is a number, expected a string'),
        # half of a surrogate pair: valid JSON, no Unicode text (the tokenizer would raise a TypeError on it)
        ('{"translation": {"en": "a \\ud800", "de": "b"}}', r'line 2: the "en" text holds a lone surrogate \\ud800'),
    ],
)
def test_bad_json_line(tmp_path, line, expected):
    path = write(tmp_path / "train.jsonl", '{"translation": {"en": "x", "de": "y"}}\n' + line + "\n")
    with pytest.raises(DataError, match=expected):
        load(tmp_path, train_file=path)


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize(
    "document", [[{"translation": {"en": "a", "de": "b"}}], {"translation": {"en": "a", "de": "b"}}]
)
def test_one_json_document_instead_of_json_lines(tmp_path, document, indent):
    path = write(tmp_path / "train.json", json.dumps(document, indent=indent))
    if isinstance(document, dict) and indent is None:  # a one-line object is valid JSON lines
        splits, _ = load(tmp_path, train_file=path, validation_size=0)
        assert pairs_of(splits["train"]) == [("a", "b")]
        return
    with pytest.raises(DataError, match="train.json line 1: .*looks like one JSON document.*one JSON object per line"):
        load(tmp_path, train_file=path)


def test_same_source_and_target_language(tmp_path):
    with pytest.raises(DataError, match="source_lang and target_lang are both 'en'"):
        load(tmp_path, dataset_name="demo", source_lang="en", target_lang="en")


@pytest.mark.parametrize("kwargs", [{}, {"validation_file": "valid.jsonl"}, {"train_file": ""}])
def test_no_training_data(tmp_path, kwargs):
    with pytest.raises(
        DataError, match=r"^no training data: pass --train_file or --dataset_name \(or --dataset_name demo"
    ):
        load(tmp_path, **kwargs)


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)


def test_count_lines_counts_as_line_iteration_does(tmp_path):
    from vaswani.fileio import count_lines

    for content in [b"", b"a", b"a\n", b"a\nb", b"a\r\nb\r\n", b"\n\n", b"x" * (1 << 24) + b"\ny"]:
        path = tmp_path / "f.txt"
        path.write_bytes(content)
        with open(path, "rb") as stream:
            assert count_lines(path) == sum(1 for _ in stream), content[:10]


@pytest.mark.parametrize("header", ["en\tde", "EN\tDE", " en \t de "])
def test_a_tsv_header_naming_the_languages_is_skipped_and_said(tmp_path, header):
    """pandas' `to_csv(sep="\\t", index=False)` starts the file with the column names: not a pair to train on."""
    path = write(tmp_path / "train.tsv", header + "\n" + "".join(f"{s}\t{t}\n" for s, t in TSV_PAIRS))
    splits, report = load(tmp_path, train_file=path, validation_size=0)
    assert pairs_of(splits["train"]) == TSV_PAIRS
    assert report.splits["train"].header_skipped and "its header line skipped" in report.summary()
    plain, plain_report = load(tmp_path, train_file=write_tsv(tmp_path / "plain.tsv", TSV_PAIRS), validation_size=0)
    assert not plain_report.splits["train"].header_skipped and "header line" not in plain_report.summary()
    # the same words elsewhere than on line 1 are a pair like any other
    later = write(tmp_path / "later.tsv", f"a\tb\n{header}\n")
    assert pairs_of(load(tmp_path, train_file=later, validation_size=0)[0]["train"]) == [
        ("a", "b"),
        tuple(header.split("\t")),
    ]


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("de\ten", r"line 1 names the columns de TAB en, but --source_lang is en .* Swap the columns"),
        ("\ten\tde", r"line 1 names the columns \(none\) TAB en TAB de: an index column first.*cut -f2,3"),
    ],
)
def test_a_tsv_header_in_the_other_order_or_after_an_index_is_an_error(tmp_path, header, message):
    """Columns in the other order would train the other direction; pandas' default index column would be read as
    the source: both are refused with the fix."""
    rows = "".join(
        f"{s}\t{t}\n" if header.count("\t") == 1 else f"{k}\t{s}\t{t}\n" for k, (s, t) in enumerate(TSV_PAIRS)
    )
    path = write(tmp_path / "train.tsv", header + "\n" + rows)
    with pytest.raises(DataError, match=message):
        load(tmp_path, train_file=path)
