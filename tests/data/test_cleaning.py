"""Cleaning the training pairs (vaswani/data/cleaning.py): `--max_length_ratio`, `--drop_duplicates` and
`--drop_copies` of `vaswani prepare` and `vaswani train` drop exactly the pairs each rule, read plainly, names (Moses'
clean-corpus-n length ratio, a copy of the source, a repeat of an earlier pair), from train only; the tokens' cache
and the prepared folder's manifest know the options, and options that disagree with a prepared folder are refused."""

import argparse
import json
import logging
import random

import datasets
import numpy as np
import pytest
from accelerate import PartialState
from conftest import train_command_in_process

from vaswani.cli import main as vaswani
from vaswani.data import prepared
from vaswani.data.cleaning import CLEANING_OPTIONS, PairFilter
from vaswani.model_folder import load_tokenizer
from vaswani.training import tasks
from vaswani.training.run_dir import RUN_DEFINING_OPTIONS

WORDS = ["the", "cat", "sat", "on", "a", "mat", "with", "its", "hat", "while", "dogs", "ran", "far", "away"]


def noisy_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """English-like pairs from a few words: about one in six repeats an earlier pair, one in ten is a copy (some
    with other surrounding white space), some have a short side against a long one."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        roll = rng.random()
        if pairs and roll < 0.16:
            pairs.append(rng.choice(pairs))
        elif roll < 0.26:
            text = " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))
            pairs.append((text, rng.choice(["", " ", "\t"]) + text + rng.choice(["", " "])))
        else:
            source = " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))
            pairs.append((source, " ".join(rng.choices(WORDS, k=rng.randint(1, 12))).upper()))
    return pairs


def reference_drops(pairs, source_length, target_length, ratio, duplicates, copies, held_out=None):
    """Each rule as its toolkit states it: Moses' clean-corpus-n drops a pair when e/f > ratio or f/e > ratio
    (lengths of at least 1); a copy's two sides are equal but for surrounding white space; a repeat is a pair seen
    earlier in the split; a held-out source is the source of one of the `held_out` pairs (None: the rule is off)."""
    seen, drop, counts = set(), [], {"length_ratio": 0, "copies": 0, "duplicates": 0, "held_out_sources": 0}
    for (source, target), s, t in zip(pairs, source_length, target_length, strict=True):
        e, f = max(int(s) - 1, 1), max(int(t) - 1, 1)  # EOS not counted
        flags = {"length_ratio": ratio is not None and (e / f > ratio or f / e > ratio),
                 "copies": copies and source.strip() == target.strip(),
                 "duplicates": duplicates and (source, target) in seen,
                 "held_out_sources": held_out is not None and any(source.strip() == h.strip() for h, _ in held_out)}  # fmt: skip
        seen.add((source, target))
        drop.append(any(flags.values()))
        for name, flagged in flags.items():
            counts[name] += flagged
    on = {"length_ratio": ratio is not None, "copies": copies, "duplicates": duplicates,
          "held_out_sources": held_out is not None}  # fmt: skip
    return np.array(drop), {name: count for name, count in counts.items() if on[name]}


def as_dataset(pairs, source="en", target="de") -> datasets.Dataset:
    return datasets.Dataset.from_dict({"translation": [{source: s, target: t} for s, t in pairs]})


@pytest.mark.parametrize("ratio", [None, 1.0, 1.5, 3.0])
@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("copies", [False, True])
@pytest.mark.parametrize("held_out_sources", [False, True])
def test_each_filter_drops_what_the_rule_read_plainly_drops(ratio, duplicates, copies, held_out_sources):
    pairs = noisy_pairs(3000)
    rng = np.random.default_rng(0)
    source_length, target_length = rng.integers(1, 40, len(pairs)), rng.integers(1, 40, len(pairs))
    validation, test = noisy_pairs(300, seed=2), noisy_pairs(300, seed=3)  # sharing some sources with train
    expected, expected_counts = reference_drops(pairs, source_length, target_length, ratio, duplicates, copies,
                                                validation + test if held_out_sources else None)  # fmt: skip
    cleaning = PairFilter(ratio, duplicates, copies, held_out_sources)
    drop, counts = cleaning.drops(as_dataset(pairs), "en", "de", source_length, target_length,
                                  [as_dataset(validation), as_dataset(test)])  # fmt: skip
    assert counts == expected_counts
    assert np.array_equal(drop, expected)
    for name, count in counts.items():  # the corpus has each kind of noise, and a ratio of 1 flags most pairs
        assert count > 100, (name, counts)


def test_pairs_that_only_look_alike_are_neither_repeats_nor_copies():
    pairs = [("ab", "c"), ("a", "bc"), ("a ", "b"), ("a", "b"), ("x", "x y"), ("ü", "ß"), ("ü", "ß"),
             ("Firefox", "Firefox "), ("", "")]  # fmt: skip
    lengths = np.full(len(pairs), 3)
    drop, counts = PairFilter(drop_duplicates=True).drops(as_dataset(pairs), "en", "de", lengths, lengths)
    assert drop.tolist() == [False] * 6 + [True, False, False] and counts == {"duplicates": 1}
    drop, counts = PairFilter(drop_copies=True).drops(as_dataset(pairs), "en", "de", lengths, lengths)
    assert drop.tolist() == [False] * 7 + [True, True] and counts == {"copies": 2}


def test_the_options_name_only_the_filters_that_are_on():
    # the tokens' cache key holds them: a run without cleaning keeps the key (and the cache) of earlier versions
    assert PairFilter().options() == {}
    assert PairFilter(1.5, True, False).options() == {"max_length_ratio": 1.5, "drop_duplicates": True}
    assert PairFilter.from_args(
        argparse.Namespace(max_length_ratio=None, drop_duplicates=False, drop_copies=True, drop_held_out_sources=True)
    ) == (PairFilter(drop_copies=True, drop_held_out_sources=True))
    # a resumed run or a distillation's student with other cleaning would not continue the same run
    assert set(CLEANING_OPTIONS) <= set(RUN_DEFINING_OPTIONS)


def write_corpus(path, pairs, source="en", target="de"):
    path.write_text("".join(json.dumps({"translation": {source: s, target: t}}) + "\n" for s, t in pairs))
    return path


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory):
    """A noisy corpus prepared with every filter on (the "train" log's lines kept); its validation split has a repeat
    and a copy of its own, and sources that two training pairs have too."""
    folder = tmp_path_factory.mktemp("cleaning")
    train = [*noisy_pairs(400, seed=1), (" a cat", "DIE KATZE"), ("Firefox", "Der Firefox")]
    validation = [("a cat", "EINE KATZE"), ("a cat", "EINE KATZE"), ("Firefox", "Firefox")]
    files = {"train": write_corpus(folder / "train.jsonl", train),
             "validation": write_corpus(folder / "valid.jsonl", validation)}  # fmt: skip
    out = folder / "prepared"
    argv = ["prepare", "--train_file", str(files["train"]), "--validation_file", str(files["validation"]),
            "--vocab_size", "400", "--cache_dir", str(folder / "cache"), "--output_dir", str(out),
            "--max_length_ratio", "2", "--drop_duplicates", "--drop_copies", "--drop_held_out_sources"]  # fmt: skip
    log, handler = logging.getLogger("train"), Lines()
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        assert vaswani(argv) == 0
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    return {"train": train, "validation": validation}, out, "\n".join(handler.lines), folder


def test_prepare_keeps_the_pairs_no_rule_names_in_order_and_every_held_out_pair(cleaned):
    pairs, out, log, _ = cleaned
    tokenizer = load_tokenizer(out)
    encoded = [tokenizer(s, text_target=t) for s, t in pairs["train"]]
    lengths = [np.array([len(e[key]) for e in encoded]) for key in ("input_ids", "labels")]
    drop, counts = reference_drops(pairs["train"], *lengths, ratio=2, duplicates=True, copies=True,
                                   held_out=pairs["validation"])  # fmt: skip
    kept = [e for e, dropped in zip(encoded, drop, strict=True) if not dropped]
    tokens = datasets.load_from_disk(str(out / "train"))
    assert tokens["input_ids"] == [e["input_ids"] for e in kept] and tokens["labels"] == [e["labels"] for e in kept]
    manifest = prepared.read_manifest(out)
    assert manifest["counts"]["train"] == {"read": 402, "kept": len(kept), "overlong": 0, **counts,
                                           "dropped": int(drop.sum())}  # fmt: skip
    assert min(counts.values()) > 0 and manifest["options"]["max_length_ratio"] == 2
    assert manifest["options"]["drop_duplicates"] is manifest["options"]["drop_copies"] is True
    assert len(datasets.load_from_disk(str(out / "validation"))) == len(pairs["validation"])  # scored whole
    said = (f"train: dropped {int(drop.sum())} pairs ({counts['length_ratio']} with a length ratio over 2, "
            f"{counts['copies']} untranslated copies of their source, {counts['duplicates']} repeats of an earlier pair, "
            f"{counts['held_out_sources']} with the source of a validation or test pair)")  # fmt: skip
    assert said in log and "validation: dropped" not in log
    assert "Removed the temporary caches" not in log  # --cache_dir: they stay


def test_prepare_says_what_each_split_kept(cleaned, capsys):
    from vaswani.cli.prepare import kept_summary

    _, out, _, _ = cleaned
    counts = prepared.read_manifest(out)["counts"]
    assert kept_summary(prepared.read_manifest(out)) == (f"train: {counts['train']['kept']:,} of 402 pairs, "
                                                         "validation: 3 of 3 pairs")  # fmt: skip
    assert counts["train"]["kept"] < 402


def test_training_beside_the_folder_with_other_cleaning_is_refused(cleaned, tmp_path):
    _, out, _, _ = cleaned
    common = ["--prepared_data", str(out), "--max_train_steps", "1", "--report_to", "none", "--output_dir",
              str(tmp_path / "r")]  # fmt: skip
    config = tmp_path / "no-copies.yaml"
    config.write_text("drop_copies: false\n")
    for extra, message in (
        (["--max_length_ratio", "1.5"], "--max_length_ratio 1.5 disagrees with --prepared_data"),
        (["--config", str(config)], "no --drop_copies disagrees with --prepared_data " + str(out) + ", which was "
         "prepared with --drop_copies (manifest.json): drop --drop_copies, or prepare the data again without "
         "--drop_copies."),
    ):  # fmt: skip
        status, stderr = train_command_in_process([*common, *extra])
        assert status == 2 and message in stderr and "Traceback" not in stderr, stderr[-2000:]
    # a folder prepared before the options existed was prepared without them
    manifest = prepared.read_manifest(out)
    older = {**manifest, "options": {k: v for k, v in manifest["options"].items() if k not in CLEANING_OPTIONS}}
    args = argparse.Namespace(task="translation", prepared_data=str(out), max_length_ratio=None, drop_duplicates=True,
                              drop_copies=False, drop_held_out_sources=False, explicit={"drop_duplicates"})  # fmt: skip
    with pytest.raises(prepared.UsageError, match="--drop_duplicates disagrees .* prepared with no --drop_duplicates"):
        prepared.apply_manifest(args, older)
    args = argparse.Namespace(**{**vars(args), "drop_duplicates": False, "explicit": set()})
    prepared.apply_manifest(args, older)
    assert (args.max_length_ratio, args.drop_duplicates, args.drop_copies, args.drop_held_out_sources) == (
        None, False, False, False)  # fmt: skip


def test_the_cache_tells_cleaned_tokens_from_plain_ones_and_keeps_the_counts(cleaned, caplog):
    pairs, _, _, folder = cleaned
    raw = {"train": as_dataset(pairs["train"])}
    tokenizer = load_tokenizer(folder / "prepared")
    args = argparse.Namespace(source_lang="en", target_lang="de", overlong="drop", max_source_length=256,
                              max_target_length=256, preprocessing_num_workers=None, cache_dir=str(folder / "c2"),
                              max_length_ratio=None, drop_duplicates=False, drop_copies=False,
                              drop_held_out_sources=False)  # fmt: skip
    plain, plain_counts = tasks.tokenize_pairs(args, raw, tokenizer, PartialState(cpu=True))
    args.drop_duplicates = True
    deduplicated, counts = tasks.tokenize_pairs(args, raw, tokenizer, PartialState(cpu=True))
    repeats = len(pairs["train"]) - len(set(pairs["train"]))
    assert len(plain["train"]) == 402 and plain_counts["train"] == {"overlong": 0, "dropped": 0}
    assert len(deduplicated["train"]) == 402 - repeats and counts["train"]["duplicates"] == repeats > 0
    with caplog.at_level(logging.INFO, logger="train"):
        again, counts_again = tasks.tokenize_pairs(args, raw, tokenizer, PartialState(cpu=True))
    assert "Tokenized data: reused the cache" in caplog.text and counts_again == counts
    assert again["train"]["input_ids"] == deduplicated["train"]["input_ids"]


def test_every_pair_dropped_is_an_error_naming_the_rules(tmp_path, capsys):
    train = write_corpus(tmp_path / "train.jsonl", [("Firefox", "Firefox"), ("OK", "OK"), ("OK", "OK")] * 4)
    argv = ["prepare", "--train_file", str(train), "--validation_size", "2", "--vocab_size", "300", "--cache_dir",
            str(tmp_path / "cache"), "--output_dir", str(tmp_path / "out"), "--drop_copies", "--drop_duplicates"]  # fmt: skip
    assert vaswani(argv) == 2
    err = capsys.readouterr().err
    assert (
        "error: every training pair was dropped (10 untranslated copies of their source, 8 repeats of an earlier pair): "
        in err
    )
    assert "relax the cleaning options" in err and "Traceback" not in err and not (tmp_path / "out").exists()


RATIO_RULE = "must be a finite number of at least 1 (the longer side's length over the shorter's), got "


@pytest.mark.parametrize(("value", "said"), [("0.5", RATIO_RULE + "0.5"), ("inf", RATIO_RULE + "inf"),
                                             ("nan", RATIO_RULE + "nan"), ("x", "expected a number, got 'x'")])  # fmt: skip
def test_a_ratio_under_one_or_not_a_number_is_refused(value, said, tmp_path, capsys):
    argv = ["prepare", "--train_file", str(tmp_path / "t.jsonl"), "--output_dir", str(tmp_path / "o"),
            "--max_length_ratio", value]  # fmt: skip
    assert vaswani(argv) == 2
    err = capsys.readouterr().err
    assert f"argument --max_length_ratio: {said}\n" in err and "Traceback" not in err
