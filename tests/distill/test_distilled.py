"""vaswani/distill/distilled.py: the chunks of the teacher's translations (complete, damaged, missing, made
otherwise) and the student's training file built from them (filters, the original pairs mixed back in, statistics),
checked against sacrebleu and against the rules written out here. No model runs: the chunks are written by hand."""

import argparse
import hashlib
import json
import math
import os

import pytest
import sacrebleu

from vaswani.data.loading import pair_file
from vaswani.distill.distilled import (
    MANIFEST_PARTS,
    build_options,
    build_training_file,
    check_complete,
    chunk_sizes,
    kept_pairs,
    make_manifest,
    manifest_differences,
    monolingual_file,
    open_distilled,
    read_chunk,
    read_manifest,
    remove_distilled,
    same_data,
    same_training_pairs,
)
from vaswani.distill.folder import DistillFolder
from vaswani.errors import DataError, UsageError

RECORDS = [  # line, source, reference, the teacher's translation and score
    (1, "one cat", "un gato", "un gato", -0.1),
    (2, "two cats", "dos gatos", "dos gato", -0.9),
    (4, "three dogs", "tres perros", "tres perros", -0.3),
    (5, "a house", "una casa", "la casa", -0.5),
    (6, "the red house", "la casa roja", "una casa roja", -0.3),
]
NO_FILTER = {"filter": "none", "filter_threshold": None, "filter_keep": None, "mix_original": False}


def write_pairs(path, pairs) -> None:
    path.write_text("".join(json.dumps({"translation": {"en": s, "es": t}}) + "\n" for s, t in pairs), "utf-8")


def distilled_folder(tmp_path, records=RECORDS, buffer_lines=2) -> tuple[DistillFolder, dict]:
    """A distilled folder whose chunks hold `records`, as the translate stage writes them."""
    data = tmp_path / "train.jsonl"
    write_pairs(data, [(source, reference) for _, source, reference, _, _ in records])
    manifest = make_manifest(pair_file("train", str(data), "en", "es"), {"folders": ["teacher"]},
                             {"num_beams": 4, "length_penalty": 0.6, "max_tokens": 4096}, buffer_lines)  # fmt: skip
    folder = DistillFolder(tmp_path / "out")
    open_distilled(folder, manifest, overwrite=False)
    for index, size in enumerate(chunk_sizes(manifest)):
        chunk = records[index * buffer_lines : index * buffer_lines + size]
        folder.chunk(index).write_text("".join(json.dumps(dict(zip(
            ("line", "source", "reference", "translation", "score"), record, strict=True))) + "\n"
            for record in chunk), "utf-8")  # fmt: skip
    return folder, manifest


def training_pairs(folder: DistillFolder) -> list[tuple[str, str]]:
    rows = [json.loads(line)["translation"] for line in folder.train_file.read_text("utf-8").splitlines()]
    return [(row["en"], row["es"]) for row in rows]


def options(**overrides) -> dict:
    return {**NO_FILTER, **overrides}


# ---------------------------------------------------------------------------------------------------------------------
# The training pairs and the manifest
# ---------------------------------------------------------------------------------------------------------------------
def test_the_pairs_are_those_training_reads_empty_sides_skipped(tmp_path):
    (tmp_path / "train.en").write_text("one\n\ntwo\nthree\n  \n", "utf-8")
    (tmp_path / "train.es").write_text("uno\ndos\n\ntres\ncuatro\n", "utf-8")
    data = pair_file("train", str(tmp_path / "train"), "en", "es")
    assert data.pairs == 2 and list(data) == [(1, "one", "uno"), (4, "three", "tres")]
    with pytest.raises(DataError, match="not found"):
        pair_file("train", str(tmp_path / "missing.jsonl"), "en", "es")


def test_chunks_cut_the_pairs_in_file_order(tmp_path):
    folder, manifest = distilled_folder(tmp_path, buffer_lines=2)
    assert manifest["chunks"] == 3 and chunk_sizes(manifest) == [2, 2, 1]
    assert [r["line"] for r in read_chunk(folder.chunk(2), 1)] == [6]


def test_a_run_made_otherwise_is_refused_and_overwrite_starts_again(tmp_path):
    folder, manifest = distilled_folder(tmp_path)
    other = {**manifest, "decoding": {**manifest["decoding"], "num_beams": 5}, "teacher": {"folders": ["other"]}}
    assert manifest_differences(manifest, other) == [
        "the teacher (its folders, their weights, or the quantization of its export)", "--teacher_num_beams 4 -> 5"]  # fmt: skip
    with pytest.raises(UsageError, match=r"made otherwise: the teacher .*--teacher_num_beams 4 -> 5.*--overwrite"):
        open_distilled(folder, other, overwrite=False)
    assert open_distilled(folder, manifest, overwrite=False)  # the same: continued
    mine = folder.distilled / "notes.txt"
    mine.write_text("mine")
    assert not open_distilled(folder, other, overwrite=True)
    assert read_manifest(folder) == json.loads(json.dumps(other)) and not folder.chunk(0).exists()
    assert mine.read_text() == "mine"  # a file that is not distilled data stays


def test_the_training_file_is_known_by_its_content_not_by_its_path_or_time(tmp_path):
    folder, manifest = distilled_folder(tmp_path)
    data = tmp_path / "train.jsonl"
    text = data.read_bytes()
    assert manifest["data"]["train_file"] == [[os.path.abspath(data), len(text),
                                               "sha256:" + hashlib.sha256(text).hexdigest()]]  # fmt: skip
    teacher, decoding = manifest["teacher"], manifest["decoding"]

    def manifest_of(path):
        return make_manifest(pair_file("train", str(path), "en", "es"), teacher, decoding, buffer_lines=2)

    # the same bytes in another folder, with another modification time (copied, downloaded again): continued
    copy = tmp_path / "elsewhere" / "train.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(text)
    os.utime(copy, ns=(10**18, 10**18))
    assert manifest_of(copy)["data"] != manifest["data"] and manifest_differences(manifest, manifest_of(copy)) == []
    assert open_distilled(folder, manifest_of(copy), overwrite=False) and folder.chunk(0).exists()
    # one character changed, the size the same: refused
    data.write_bytes(text.replace(b"dos gatos", b"dos Gatos"))
    assert data.stat().st_size == len(text)
    assert manifest_differences(manifest, manifest_of(data)) == [MANIFEST_PARTS["data"]]
    with pytest.raises(UsageError, match=r"made otherwise: the training data"):
        open_distilled(folder, manifest_of(data), overwrite=False)
    # a manifest written before the content was hashed ([path, size, modification time]) needs the file unmodified
    data.write_bytes(text)
    stat = data.stat()
    earlier = {**manifest, "data": {**manifest["data"], "train_file": [[os.path.abspath(data), stat.st_size,
                                                                        stat.st_mtime_ns]]}}  # fmt: skip
    assert manifest_differences(earlier, manifest) == []
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert manifest_differences(earlier, manifest) == [MANIFEST_PARTS["data"]]


def test_a_killed_write_leaves_a_temporary_file_that_the_next_run_removes(tmp_path):
    folder, manifest = distilled_folder(tmp_path)
    leftover = folder.distilled / ".tmp-chunk-00001.jsonl-123"
    leftover.write_text('{"line": 1')
    open_distilled(folder, manifest, overwrite=False)
    assert not leftover.exists()
    # killed while writing the manifest itself: the next run starts afresh
    folder = DistillFolder(tmp_path / "new")
    folder.distilled.mkdir(parents=True)
    (folder.distilled / ".tmp-distilled.json-123").write_text("{")
    assert not open_distilled(folder, manifest, overwrite=False)
    assert read_manifest(folder) == manifest and [p.name for p in folder.distilled.iterdir()] == ["distilled.json"]


def test_an_empty_half_written_or_damaged_distilled_folder_is_a_clear_error(tmp_path):
    folder = DistillFolder(tmp_path / "empty")
    (folder.distilled).mkdir(parents=True)
    with pytest.raises(UsageError, match="holds no distilled data.*run --stage translate"):
        read_manifest(folder)
    folder, manifest = distilled_folder(tmp_path)
    folder.chunk(1).unlink()
    with pytest.raises(UsageError, match="incomplete: 2 of 3 chunks are translated; run --stage translate"):
        check_complete(folder, manifest)
    folder.chunk(1).write_text('{"line": 2, "source": "two cats"}\nnot json\n')
    with pytest.raises(UsageError, match=r"chunk-00001.jsonl is damaged \(line 1 lacks one of line, source"):
        build_training_file(folder, manifest, options())
    folder.chunk(1).write_text("x\n")
    with pytest.raises(UsageError, match=r"damaged \(1 lines, not 2\): delete it, and run --stage translate"):
        build_training_file(folder, manifest, options())
    folder.chunk(1).write_bytes(b"\xff\n\n")
    with pytest.raises(UsageError, match="not UTF-8"):
        build_training_file(folder, manifest, options())
    folder.chunk(1).write_text("")
    folder.chunk(3).write_text("")
    with pytest.raises(UsageError, match="chunks its distilled.json does not count"):
        check_complete(folder, manifest)
    folder.manifest.write_text("{")
    with pytest.raises(UsageError, match="distilled.json is damaged"):
        read_manifest(folder)


def test_remove_distilled_removes_its_own_files_only(tmp_path):
    folder, _ = distilled_folder(tmp_path)
    (folder.distilled / "notes.txt").write_text("mine")
    assert remove_distilled(folder) == 4  # three chunks and the manifest
    assert [p.name for p in folder.distilled.iterdir()] == ["notes.txt"]


# ---------------------------------------------------------------------------------------------------------------------
# The training file
# ---------------------------------------------------------------------------------------------------------------------
def test_without_a_filter_the_student_trains_on_every_translation(tmp_path):
    folder, manifest = distilled_folder(tmp_path)
    stats = build_training_file(folder, manifest, options())
    assert training_pairs(folder) == [(source, translation) for _, source, _, translation, _ in RECORDS]
    translations, references = [r[3] for r in RECORDS], [r[2] for r in RECORDS]
    assert stats["against_references"]["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(translations, [references]).score
    )
    assert stats["against_references"]["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(translations, [references]).score
    )
    assert stats["pairs_translated"] == stats["kept"] == stats["training_pairs"] == 5
    assert stats["identical_to_reference"] == pytest.approx(2 / 5)
    assert stats["mean_teacher_score"] == pytest.approx(sum(r[4] for r in RECORDS) / 5)
    assert stats["mean_words"]["translation"] == pytest.approx(sum(len(r[3].split()) for r in RECORDS) / 5)
    assert json.loads(folder.stats.read_text()) == stats


def test_the_score_filter_keeps_the_pairs_at_or_above_the_threshold_and_mixes_originals_back(tmp_path):
    folder, manifest = distilled_folder(tmp_path)
    stats = build_training_file(folder, manifest, options(filter="teacher_score", filter_threshold=-0.3,
                                                          mix_original=True))  # fmt: skip
    kept = [(s, t) for _, s, _, t, score in RECORDS if score >= -0.3]
    # every original pair whose reference is not already there as a kept translation ("one cat", "three dogs" are)
    originals = [(s, r) for _, s, r, t, score in RECORDS if not (score >= -0.3 and r == t)]
    assert training_pairs(folder) == kept + originals
    assert (stats["kept"], stats["filtered_out"], stats["original_pairs_added"]) == (3, 2, 3)
    assert stats["training_pairs"] == 6


def test_the_chrf_filter_keeps_the_best_share_by_sentence_chrf_against_the_reference(tmp_path):
    folder, manifest = distilled_folder(tmp_path)
    build_training_file(folder, manifest, options(filter="chrf", filter_keep=0.6))
    chrf = [sacrebleu.sentence_chrf(t, [r]).score for _, _, r, t, _ in RECORDS]
    best = sorted(range(5), key=lambda i: (-chrf[i], i))[: math.ceil(0.6 * 5)]
    assert training_pairs(folder) == [(RECORDS[i][1], RECORDS[i][3]) for i in sorted(best)]


def test_the_file_is_rebuilt_only_when_its_options_change(tmp_path):
    folder, manifest = distilled_folder(tmp_path)
    build_training_file(folder, manifest, options())
    before = folder.train_file.stat().st_mtime_ns
    build_training_file(folder, manifest, options())
    assert folder.train_file.stat().st_mtime_ns == before
    build_training_file(folder, manifest, options(mix_original=True))
    assert len(training_pairs(folder)) == 5 + 3


def test_kept_pairs_thresholds_shares_and_ties():
    values = [0.5, 0.9, 0.5, 0.1]
    assert kept_pairs(values, options(filter="chrf", filter_threshold=0.5), 4) == [True, True, True, False]
    assert kept_pairs(values, options(filter="chrf", filter_keep=0.5), 4) == [True, True, False, False]  # tie: first
    assert kept_pairs(values, options(filter="chrf", filter_keep=0.01), 4) == [False, True, False, False]  # >= 1 pair
    assert kept_pairs([], options(), 3) == [True, True, True]


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(filter="none", filter_threshold=1.0), "--filter_threshold needs a --filter"),
        (dict(filter="none", filter_keep=0.5), "--filter_keep needs a --filter"),
        (dict(filter="chrf"), "--filter chrf needs one of --filter_threshold"),
        (dict(filter="teacher_score", filter_threshold=-1.0, filter_keep=0.5), "needs one of --filter_threshold"),
        (
            dict(filter="chrf", filter_keep=1.5),
            r"--filter_keep 1.5 is not allowed; use a share of the pairs in \(0, 1\]",
        ),
    ],
)
def test_filter_options_that_do_not_go_together_are_refused(values, message):
    args = argparse.Namespace(**{**NO_FILTER, **values})
    with pytest.raises(UsageError, match=message):
        build_options(args)


# ---------------------------------------------------------------------------------------------------------------------
# --monolingual_file: source text without references, translated after the training pairs
# ---------------------------------------------------------------------------------------------------------------------
MONOLINGUAL = [  # line, sentence, the teacher's translation and score
    (1, "four birds", "cuatro pájaros", -0.2),
    (3, "a green house", "una casa verde", -0.6),
]


def test_the_monolingual_file_keeps_its_sentences_leaving_out_blank_lines_and_held_out_sources(tmp_path, caplog):
    path = tmp_path / "mono.txt"
    path.write_text("four birds\n\nthe red house\na green house\n   \n", "utf-8")
    with caplog.at_level("INFO", logger="vaswani.distill"):
        mono = monolingual_file(str(path), {"the red house", "a cat"})
    assert mono.sentences == 2 and list(mono) == [(1, "four birds", None), (4, "a green house", None)]
    assert "1 sentences left out: they are sources of --validation_file or --test_file" in caplog.text
    assert mono.identity()["file"][1:] == [
        path.stat().st_size,
        "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest(),
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.txt", None, r"--monolingual_file .*missing.txt: no such file"),
        (
            "mono.jsonl",
            '{"text": "x"}\n',
            "give plain text, one sentence per line .pairs with references belong in --train_file.",
        ),
        (
            "mono.txt",
            "the red house\n\n",
            r"has no sentence to translate \(1 blank lines, 1 sources of the validation",
        ),
        ("latin1.txt", b"caf\xe9\n", "line 1: not UTF-8"),
    ],
)
def test_a_monolingual_file_without_text_to_translate_is_refused(tmp_path, name, text, message):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text, "utf-8")
    with pytest.raises((UsageError, DataError), match=message):
        monolingual_file(str(path), {"the red house"})


def monolingual_folder(tmp_path, buffer_lines=3, held_out=frozenset()) -> tuple[DistillFolder, dict]:
    """`distilled_folder` with MONOLINGUAL's sentences after RECORDS' pairs, as the translate stage writes them."""
    data, mono = tmp_path / "train.jsonl", tmp_path / "mono.txt"
    write_pairs(data, [(source, reference) for _, source, reference, _, _ in RECORDS])
    mono.write_text("four birds\n\na green house\n", "utf-8")
    manifest = make_manifest(pair_file("train", str(data), "en", "es"), {"folders": ["teacher"]},
                             {"num_beams": 4, "length_penalty": 0.6, "max_tokens": 4096}, buffer_lines,
                             monolingual_file(str(mono), set(held_out)))  # fmt: skip
    folder = DistillFolder(tmp_path / "out")
    open_distilled(folder, manifest, overwrite=False)
    records = [dict(zip(("line", "source", "reference", "translation", "score"), r, strict=True)) for r in RECORDS]
    records += [{"line": line, "source": s, "reference": None, "translation": t, "score": score}
                for line, s, t, score in MONOLINGUAL]  # fmt: skip
    for index, size in enumerate(chunk_sizes(manifest)):
        chunk = records[index * buffer_lines : index * buffer_lines + size]
        folder.chunk(index).write_text("".join(json.dumps(r) + "\n" for r in chunk), "utf-8")
    return folder, manifest


def test_monolingual_sentences_follow_the_pairs_in_the_chunks_and_train_the_student_without_references(tmp_path,
                                                                                                      caplog):  # fmt: skip
    folder, manifest = monolingual_folder(tmp_path, buffer_lines=3)
    caplog.set_level("INFO", logger="vaswani.distill")
    assert manifest["data"]["monolingual"]["sentences"] == 2
    assert manifest["chunks"] == 3 and chunk_sizes(manifest) == [3, 3, 1]  # 5 pairs + 2 sentences
    assert [r["reference"] for r in read_chunk(folder.chunk(1), 3)] == ["una casa", "la casa roja", None]
    stats = build_training_file(folder, manifest, options(mix_original=True))
    distilled = [(s, t) for _, s, _, t, _ in RECORDS] + [(s, t) for _, s, t, _ in MONOLINGUAL]
    originals = [(s, r) for _, s, r, t, _ in RECORDS if r != t]  # none for a sentence without a reference
    assert training_pairs(folder) == distilled + originals
    assert (stats["pairs_translated"], stats["monolingual_translated"], stats["kept"]) == (5, 2, 7)
    assert (stats["original_pairs_added"], stats["training_pairs"]) == (3, 10)
    assert "7 distilled pairs kept of 7, 3 original pairs added" in caplog.text
    # the scores against the references are those of the training pairs alone (sacrebleu directly)
    translations, references = [r[3] for r in RECORDS], [r[2] for r in RECORDS]
    assert stats["against_references"]["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(translations, [references]).score
    )
    assert stats["identical_to_reference"] == pytest.approx(2 / 5)
    scores = [r[4] for r in RECORDS] + [r[3] for r in MONOLINGUAL]
    assert stats["mean_teacher_score"] == pytest.approx(sum(scores) / 7)
    # the teacher's own score ranks every translation, the monolingual ones included
    build_training_file(folder, manifest, options(filter="teacher_score", filter_keep=0.5))
    best = sorted(range(7), key=lambda i: (-scores[i], i))[:4]
    assert training_pairs(folder) == [distilled[i] for i in sorted(best)]


def test_chrf_needs_references_so_it_is_refused_with_monolingual_sentences():
    args = argparse.Namespace(**{**NO_FILTER, "filter": "chrf", "filter_keep": 0.9})
    assert build_options(args)["filter"] == "chrf"
    with pytest.raises(
        UsageError, match="--filter chrf ranks .* --monolingual_file have none: use --filter teacher_score"
    ):
        build_options(args, monolingual=True)


def test_another_monolingual_file_or_other_held_out_sources_make_other_chunks(tmp_path):
    folder, manifest = monolingual_folder(tmp_path)
    data, mono = tmp_path / "train.jsonl", tmp_path / "mono.txt"

    def manifest_of(mono_path, held_out=()):
        monolingual = monolingual_file(str(mono_path), set(held_out)) if mono_path else None
        return make_manifest(pair_file("train", str(data), "en", "es"), manifest["teacher"], manifest["decoding"],
                             buffer_lines=3, monolingual=monolingual)  # fmt: skip

    assert manifest_differences(manifest, manifest_of(mono)) == []
    # the later stages read the training file again, not the monolingual one: the same training pairs
    assert same_training_pairs(manifest["data"], manifest_of(None)["data"])
    assert not same_data(manifest["data"], manifest_of(None)["data"])
    copy = tmp_path / "copy" / "mono.txt"  # the same text elsewhere: continued
    copy.parent.mkdir()
    copy.write_bytes(mono.read_bytes())
    assert manifest_differences(manifest, manifest_of(copy)) == []
    assert open_distilled(folder, manifest_of(copy), overwrite=False)
    data_changed = [MANIFEST_PARTS["data"]]
    assert manifest_differences(manifest, manifest_of(None)) == data_changed  # without it
    assert manifest_differences(manifest_of(None), manifest) == data_changed  # with it, where there was none
    assert manifest_differences(manifest, manifest_of(mono, {"four birds"})) == data_changed  # one left out
    assert manifest_differences(manifest, manifest_of(mono, {"not in it"})) == data_changed  # other held-out sources
    mono.write_text("four birds\n\na green House\n", "utf-8")  # one character
    assert manifest_differences(manifest, manifest_of(mono)) == data_changed
    with pytest.raises(UsageError, match=r"made otherwise: the training data \(--train_file, --monolingual_file"):
        open_distilled(folder, manifest_of(mono), overwrite=False)


def test_a_chunk_record_needs_its_reference_field_even_when_it_is_null(tmp_path):
    folder, manifest = monolingual_folder(tmp_path)
    lines = folder.chunk(2).read_text("utf-8").splitlines()
    record = json.loads(lines[0])
    del record["reference"]
    folder.chunk(2).write_text(json.dumps(record) + "\n", "utf-8")
    with pytest.raises(UsageError, match="line 1 lacks one of line, source, reference"):
        read_chunk(folder.chunk(2), 1)
