"""The distilled data: the teacher's translations of every training source (and of every sentence of
--monolingual_file), in chunks written atomically, and the student's training file built from them.

Chunks. The training pairs are read as `vaswani train` reads them (`vaswani.data.loading`: .jsonl, .tsv or two
aligned files; a pair with an empty side is skipped, as training skips it) and cut into chunks of `--buffer_lines`
pairs, in file order, followed by the sentences of --monolingual_file (source text without references: a UTF-8 text file,
one sentence per line; blank lines, and sentences that are sources of --validation_file or --test_file, are left out,
so that the student never learns the teacher's translation of a sentence it is chosen or tested on). Each chunk is
translated (sorted by length and batched by `Translator`) and written at once to
`chunk-NNNNN.jsonl` through a temporary file renamed when complete, one JSON object per pair: its line in the
training file (or in the monolingual file), source, reference (null for a monolingual sentence), the teacher's
translation and score (as `vaswani translate --scores` gives it: the
log-probability over length ** --teacher_length_penalty). A killed run leaves complete chunks and at most one
temporary file; the next run removes that and translates only the chunks that are missing.

`distilled.json`, written before the first chunk, records what the chunks are made of: the training file (path,
size, SHA-256 of its content), the languages, the number of pairs, the monolingual file (the same, its number of
sentences kept and the SHA-256 of the held-out sources that were left out of it), the teacher (folders, their weights' identity, how
it decodes), its decoding settings and --buffer_lines. A run that would make them differently (another teacher, other
settings, a changed training file) is refused rather than mixing two kinds of chunks: run with the same options, or
pass --overwrite_output_dir to translate again. The training file is known by its content, not by its path or
modification time: a copy of it, or the same file downloaded or checked out again, continues the chunks.

The training file `train.jsonl` holds the kept distilled pairs (source, teacher's translation), then, with
--mix_original, the original pairs (source, reference) whose reference differs from the kept translation (a
monolingual sentence has none). Filters (--filter): `teacher_score` ranks pairs by the teacher's score, `chrf` by
sentence chrF of the translation against the reference (sacrebleu; refused with monolingual sentences, which have no
reference); --filter_threshold keeps the pairs at or above a value, --filter_keep the best share
(ties in file order). `stats.json` records the options it was built with (a later run with the same options reuses
the file) and the distilled data's statistics.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import CHRF
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from vaswani.constants import TMP_PREFIX
from vaswani.data.loading import PairFile, is_empty, read_lines
from vaswani.distill.folder import CHUNK_NAME, MANIFEST_FILE, STATS_FILE, TRAIN_FILE, DistillFolder
from vaswani.errors import UsageError
from vaswani.fileio import atomic_output, write_file_atomically
from vaswani.inference.translator import Translator
from vaswani.metrics import corpus_scores

logger = logging.getLogger("vaswani.distill")

MANIFEST_FORMAT = "vaswani-distilled"
MANIFEST_VERSION = 1
FILTERS = ("none", "teacher_score", "chrf")
CHUNK_FIELDS = {"line": int, "source": str, "reference": (str, type(None)), "translation": str, "score": (int, float)}
# What each part of distilled.json stands for, in the message that refuses a run made differently.
MANIFEST_PARTS = {
    "data": "the training data (--train_file, --monolingual_file, their languages, or a file changed since)",
    "teacher": "the teacher (its folders, their weights, or the quantization of its export)",
    "buffer_lines": "--buffer_lines",
}


# ---------------------------------------------------------------------------------------------------------------------
# The training pairs
# ---------------------------------------------------------------------------------------------------------------------
def data_identity(data: PairFile) -> dict:
    """What the manifest records of the training data: each file's [absolute path, size, "sha256:" + its content's
    SHA-256], the languages and the number of pairs (compared by `same_data`)."""
    files = [[os.path.abspath(path), os.stat(path).st_size, content_digest(path)] for path in data.source.paths]
    return {"train_file": files, "source_lang": data.source_lang, "target_lang": data.target_lang,
            "pairs": data.pairs}  # fmt: skip


@dataclass(frozen=True)
class MonolingualFile:
    """The sentences of --monolingual_file the teacher translates (`sentences` of them), in file order: every
    non-blank line that is not one of the `held_out` sources (those of the validation and test files)."""

    path: str
    sentences: int
    held_out: frozenset[str]

    def __iter__(self) -> Iterator[tuple[int, str, None]]:
        """(line number, sentence, None: no reference) of every sentence kept."""
        for line, text, kind in monolingual_lines(self.path, self.held_out):
            if kind == "sentence":
                yield line, text, None

    def identity(self) -> dict:
        """What the manifest records of it (compared by `same_data`): [absolute path, size, "sha256:" + its content's
        SHA-256], the sentences kept, and the SHA-256 of the held-out sources (other ones may leave out others)."""
        held_out = hashlib.sha256("\n".join(sorted(self.held_out)).encode("utf-8", "surrogatepass")).hexdigest()
        return {"file": [os.path.abspath(self.path), os.stat(self.path).st_size, content_digest(self.path)],
                "sentences": self.sentences, "held_out": "sha256:" + held_out}  # fmt: skip


def monolingual_lines(path: str, held_out: set[str] | frozenset[str]) -> Iterator[tuple[int, str, str]]:
    """(line number, text, kind) of every line of a monolingual file: "blank", "held out" (a source of the validation
    or test file) or "sentence" (kept for the teacher)."""
    for line, text in enumerate(read_lines(path), 1):
        yield line, text, "blank" if is_empty(text) else "held out" if text in held_out else "sentence"


def monolingual_file(path: str, held_out: set[str]) -> MonolingualFile:
    """--monolingual_file `path`, read once to count its sentences (a `DataError` names a line that is not UTF-8, and
    a file without a sentence is a `UsageError`); the sentences among `held_out` are left out, and said in the log."""
    if not os.path.isfile(path):
        raise UsageError(f"--monolingual_file {path}: no such file (source text without references, one sentence per "
                         "line)")  # fmt: skip
    if path.endswith((".jsonl", ".tsv")):
        raise UsageError(f"--monolingual_file {path}: give plain text, one sentence per line (pairs with references "
                         "belong in --train_file)")  # fmt: skip
    kinds = Counter(kind for _, _, kind in monolingual_lines(path, held_out))
    sentences, blank, left_out = kinds["sentence"], kinds["blank"], kinds["held out"]
    if not sentences:
        raise UsageError(f"--monolingual_file {path} has no sentence to translate ({blank:,} blank lines, {left_out:,} "
                         "sources of the validation or test file)")  # fmt: skip
    if left_out:
        logger.info("--monolingual_file: %s sentences left out: they are sources of --validation_file or --test_file",
                    f"{left_out:,}")  # fmt: skip
    return MonolingualFile(path, sentences, frozenset(held_out))


def content_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of the file's bytes, written "sha256:<hex>" (read in blocks: about a second a GB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):  # (hashlib.file_digest is Python 3.11's; we support 3.10)
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def same_data(saved: dict, wanted: dict) -> bool:
    """Whether the data a manifest recorded (`saved`) is the data `wanted` (`data_identity`): the same languages
    and pairs, and files of the same size and content wherever they are now."""
    files, wanted_files = saved.get("train_file"), wanted["train_file"]
    if not isinstance(files, list) or len(files) != len(wanted_files):
        return False
    mono, wanted_mono = saved.get("monolingual"), wanted.get("monolingual")
    if (mono is None) != (wanted_mono is None):
        return False
    if mono is not None and not (isinstance(mono, dict) and same_file(mono.get("file"), wanted_mono["file"])
                                 and {**mono, "file": None} == {**wanted_mono, "file": None}):  # fmt: skip
        return False
    apart = ("train_file", "monolingual")
    others = [{key: value for key, value in identity.items() if key not in apart} for identity in (saved, wanted)]
    return others[0] == others[1] and all(map(same_file, files, wanted_files))


def same_training_pairs(saved: dict, wanted: dict) -> bool:
    """`same_data` for the training pairs alone (the stages after translate read the training file again, not the
    monolingual one: its sentences are in the chunks)."""
    return same_data({key: value for key, value in saved.items() if key != "monolingual"}, wanted)


def same_file(saved: list, wanted: list) -> bool:
    """One file of `same_data`: [path, size, digest] recorded and now. A manifest written before the content was
    hashed recorded [path, size, modification time]: the same file, unmodified since."""
    path, size, digest = wanted
    if isinstance(saved, list) and len(saved) == 3 and isinstance(saved[2], str):
        return saved[1:] == [size, digest]
    return saved == [path, size, os.stat(path).st_mtime_ns]


def first_sources(data: PairFile, count: int) -> list[str]:
    """The first `count` sources of `data`."""
    return [source for _, source, _ in itertools.islice(data, count)]


# ---------------------------------------------------------------------------------------------------------------------
# distilled.json
# ---------------------------------------------------------------------------------------------------------------------
def make_manifest(data: PairFile, teacher: dict, decoding: dict, buffer_lines: int,
                  monolingual: MonolingualFile | None = None) -> dict:  # fmt: skip
    """What the chunks are made of (see the module docstring)."""
    identity = data_identity(data)
    if monolingual is not None:
        identity["monolingual"] = monolingual.identity()
    sentences = data.pairs + (monolingual.sentences if monolingual is not None else 0)
    return {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "data": identity, "teacher": teacher,
        "decoding": decoding, "buffer_lines": buffer_lines, "chunks": math.ceil(sentences / buffer_lines),
    }  # fmt: skip


def monolingual_sentences(manifest: dict) -> int:
    """The monolingual sentences the chunks hold after the training pairs (0 without --monolingual_file)."""
    return (manifest["data"].get("monolingual") or {}).get("sentences", 0)


def read_manifest(folder: DistillFolder) -> dict:
    """The distilled data's `distilled.json`, or a `UsageError` saying that there is none (or a damaged one)."""
    path = folder.manifest
    if not path.is_file():
        raise UsageError(f"{folder.distilled} holds no distilled data ({MANIFEST_FILE} is missing): run --stage "
                         "translate (or --stage all) first")  # fmt: skip
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise UsageError(f"{path} is damaged ({error}): pass --overwrite_output_dir to translate again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise UsageError(f"{path} is not the manifest of distilled data: pass --overwrite_output_dir to translate "
                         "again")  # fmt: skip
    if manifest.get("version") != MANIFEST_VERSION:
        raise UsageError(f"{path} was written in format version {manifest.get('version')}; this vaswani reads version "
                         f"{MANIFEST_VERSION}: pass --overwrite_output_dir to translate again")  # fmt: skip
    return manifest


def manifest_differences(saved: dict, wanted: dict) -> list[str]:
    """What differs between two manifests, in words (an option's old and new value where one option says it)."""
    differences = []
    for key, value in wanted.items():
        if key == "decoding":
            differences += [f"--teacher_{name} {saved[key].get(name)} -> {new}" for name, new in value.items()
                            if saved[key].get(name) != new]  # fmt: skip
        elif key == "data":
            if not same_data(saved.get(key) or {}, value):
                differences.append(MANIFEST_PARTS[key])
        elif saved.get(key) != value and key in MANIFEST_PARTS:
            differences.append(MANIFEST_PARTS[key])
    return differences


def open_distilled(folder: DistillFolder, manifest: dict, overwrite: bool) -> bool:
    """Make the distilled folder ready for `manifest`'s chunks: with `overwrite`, what an earlier run wrote there is
    removed first; an existing manifest must equal `manifest` (its chunks are continued), a new one is written.
    Removes the temporary file a killed chunk left. Returns whether an earlier run's manifest was continued."""
    if overwrite and (removed := remove_distilled(folder)):
        logger.info("--overwrite_output_dir: removed the earlier distilled data (%d files)", removed)
    continued = folder.manifest.is_file()
    if continued:
        differences = manifest_differences(read_manifest(folder), manifest)
        if differences:
            raise UsageError(
                f"{folder.distilled} holds translations made otherwise: {'; '.join(differences)}. Run with the "
                f"options it was made with to continue it (its {MANIFEST_FILE} says them), or pass "
                "--overwrite_output_dir to translate again"
            )
    else:
        if any(is_distilled_file(e) and not e.name.startswith(TMP_PREFIX) for e in folder.distilled.glob("*")):
            raise UsageError(f"{folder.distilled} holds chunks but no {MANIFEST_FILE} that says how they were made: "
                             "pass --overwrite_output_dir to translate again (only distilled data is removed)")  # fmt: skip
        folder.distilled.mkdir(parents=True, exist_ok=True)
        write_file_atomically(folder.manifest, json.dumps(manifest, indent=1) + "\n")
    for leftover in folder.distilled.glob(f"{TMP_PREFIX}*"):
        leftover.unlink()
    return continued


def remove_distilled(folder: DistillFolder) -> int:
    """Delete the files of distilled data (chunks, manifest, training file, statistics, temporary files) from the
    distilled folder, and nothing else; returns how many."""
    ours = [entry for entry in folder.distilled.glob("*") if is_distilled_file(entry)]
    for entry in ours:
        entry.unlink()
    return len(ours)


def is_distilled_file(path: Path) -> bool:
    """Whether `path` is a file of distilled data: a chunk, the manifest, the training file, its statistics, or what
    a killed write of one left."""
    name = path.name
    return path.is_file() and bool(CHUNK_NAME.fullmatch(name) or name in (MANIFEST_FILE, TRAIN_FILE, STATS_FILE)
                                   or name.startswith(TMP_PREFIX))  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# Chunks
# ---------------------------------------------------------------------------------------------------------------------
def chunk_sizes(manifest: dict) -> list[int]:
    """The number of sentences of each chunk (the training pairs', then the monolingual ones')."""
    sentences, size = manifest["data"]["pairs"] + monolingual_sentences(manifest), manifest["buffer_lines"]
    return [min(size, sentences - index * size) for index in range(manifest["chunks"])]


def translate_chunks(folder: DistillFolder, manifest: dict, data: PairFile, translator: Translator,
                     progress: bool, monolingual: MonolingualFile | None = None,
                     target_language: str | None = None) -> dict:  # fmt: skip
    """Translate the chunks that are missing (see the module docstring): the training pairs' sources, then the
    `monolingual` sentences, into `target_language` where the teacher is multilingual (its token's code); a progress
    bar on stderr (unless not `progress`) and one log line per chunk say how fast. Returns what was done."""
    sizes = chunk_sizes(manifest)
    done = [index for index in range(len(sizes)) if folder.chunk(index).is_file()]
    if done:
        logger.info("Distilled data: %d of %d chunks were translated by an earlier run (%s sentences): continuing "
                    "with the others", len(done), len(sizes), f"{sum(sizes[i] for i in done):,}")  # fmt: skip
    decoding = manifest["decoding"]
    bar = tqdm(total=sum(sizes), initial=sum(sizes[i] for i in done), unit="sentence", desc="Teacher translating",
               disable=not progress, dynamic_ncols=True)  # fmt: skip
    pairs, translated, start = itertools.chain(data, monolingual or ()), 0, time.perf_counter()
    with bar, logging_redirect_tqdm():
        for index, size in enumerate(sizes):
            chunk = list(itertools.islice(pairs, size))
            if index in done:
                continue
            chunk_start = time.perf_counter()
            results = translator.translate_hypotheses(
                [source for _, source, _ in chunk], num_beams=decoding["num_beams"],
                length_penalty=decoding["length_penalty"], batch_tokens=decoding["max_tokens"], scores=True,
                progress=bar.update, on_truncated=lambda indices, first=chunk[0][0]: logger.warning(
                    "%d source(s) of the chunk from line %d are longer than the teacher's %d tokens and were "
                    "truncated", len(indices), first, translator.max_source_length),
                target_languages=target_language,
            )  # fmt: skip
            write_chunk(folder.chunk(index), chunk, results)
            seconds = time.perf_counter() - chunk_start
            translated += len(chunk)
            logger.info("Chunk %d/%d: %s sentences in %.1f s (%.1f sentences/s)", index + 1, len(sizes),
                        f"{len(chunk):,}", seconds, len(chunk) / seconds)  # fmt: skip
    seconds = time.perf_counter() - start
    if translated:
        logger.info("The teacher translated %s sentences in %.1f s (%.1f sentences/s)", f"{translated:,}", seconds,
                    translated / seconds)  # fmt: skip
    return {"chunks": len(sizes), "chunks_reused": len(done), "sentences_translated": translated, "seconds": seconds}


def write_chunk(path: Path, chunk: list[tuple[int, str, str]], results: list) -> None:
    """One chunk's records, atomically (a kill leaves the complete file or none)."""
    with atomic_output(path, "w", encoding="utf-8", newline="\n") as stream:
        for (line, source, reference), hypotheses in zip(chunk, results, strict=True):
            best = hypotheses[0]
            record = {"line": line, "source": source, "reference": reference, "translation": best.text,
                      "score": best.score}  # fmt: skip
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")


def check_complete(folder: DistillFolder, manifest: dict) -> None:
    """Every chunk of `manifest` must be there, and no other; otherwise a `UsageError` with the fix."""
    count = manifest["chunks"]
    missing = [index for index in range(count) if not folder.chunk(index).is_file()]
    if missing:
        raise UsageError(f"the distilled data in {folder.distilled} is incomplete: {count - len(missing)} of {count} "
                         "chunks are translated; run --stage translate (or --stage all) to finish it")  # fmt: skip
    extra = sorted(entry.name for entry in folder.distilled.iterdir()
                   if (match := CHUNK_NAME.fullmatch(entry.name)) and int(match.group(1)) >= count)  # fmt: skip
    if extra:
        raise UsageError(f"{folder.distilled} holds chunks its {MANIFEST_FILE} does not count ({', '.join(extra)}): "
                         "pass --overwrite_output_dir to translate again")  # fmt: skip


def read_chunk(path: Path, expected: int) -> list[dict]:
    """The records of one chunk; a `UsageError` naming the file and the fix when it is damaged."""

    def damaged(problem: str) -> UsageError:
        return UsageError(f"{path} is damaged ({problem}): delete it, and run --stage translate to translate its "
                          f"{expected:,} pairs again")  # fmt: skip

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise damaged(f"not UTF-8: {error.reason} at byte {error.start}") from None
    if len(lines) != expected:
        raise damaged(f"{len(lines):,} lines, not {expected:,}")
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise damaged(f"line {number} is not JSON") from None
        if not isinstance(record, dict) or any(
            k not in record or not isinstance(record[k], kind) for k, kind in CHUNK_FIELDS.items()
        ):
            raise damaged(f"line {number} lacks one of {', '.join(CHUNK_FIELDS)}")
        records.append(record)
    return records


def distilled_records(folder: DistillFolder, manifest: dict) -> Iterator[dict]:
    """Every record of every chunk, in training-file order (the chunks checked to be complete first)."""
    check_complete(folder, manifest)
    for index, size in enumerate(chunk_sizes(manifest)):
        yield from read_chunk(folder.chunk(index), size)


# ---------------------------------------------------------------------------------------------------------------------
# The student's training file
# ---------------------------------------------------------------------------------------------------------------------
def build_options(args, monolingual: bool = False) -> dict:
    """The options the training file is built with, checked: a --filter needs exactly one of --filter_threshold and
    --filter_keep, and neither goes without one; chrF needs references, which `monolingual` sentences lack."""
    threshold, keep = args.filter_threshold, args.filter_keep
    if args.filter == "chrf" and monolingual:
        raise UsageError("--filter chrf ranks the teacher's translations against their references, and the sentences "
                         "of --monolingual_file have none: use --filter teacher_score (the teacher's own score)")  # fmt: skip
    if args.filter == "none" and (threshold is not None or keep is not None):
        given = "--filter_threshold" if threshold is not None else "--filter_keep"
        raise UsageError(f"{given} needs a --filter to apply: --filter teacher_score or --filter chrf")
    if args.filter != "none" and (threshold is None) == (keep is None):
        raise UsageError(f"--filter {args.filter} needs one of --filter_threshold (keep the pairs scoring at least "
                         "this) and --filter_keep (keep this share of the pairs, the best)")  # fmt: skip
    if keep is not None and not 0 < keep <= 1:
        raise UsageError(f"--filter_keep {keep} is not allowed; use a share of the pairs in (0, 1]")
    return {"filter": args.filter, "filter_threshold": threshold, "filter_keep": keep,
            "mix_original": args.mix_original}  # fmt: skip


def provenance(manifest: dict, stats: dict) -> dict:
    """What the student's run_args.json and model card say of its training file (`distilled_from`): the teachers and
    the training file they translated (names only, as a published card shows paths), the pairs the file holds and how
    many of them are original pairs mixed back in."""
    return {
        "teachers": [Path(teacher).name for teacher in manifest["teacher"]["folders"]],
        "train_file": " + ".join(Path(entry[0]).name for entry in manifest["data"]["train_file"]),
        "monolingual_sentences": monolingual_sentences(manifest),
        "training_pairs": stats["training_pairs"], "original_pairs_added": stats["original_pairs_added"],
    }  # fmt: skip


def build_training_file(folder: DistillFolder, manifest: dict, options: dict) -> dict:
    """Write the student's training file and its statistics (see the module docstring), unless the existing ones were
    built with the same `options`; returns the statistics."""
    if folder.train_file.is_file() and folder.stats.is_file():
        saved = json.loads(folder.stats.read_text(encoding="utf-8"))
        if saved.get("build") == options:
            logger.debug("Distilled data: %s reused (built with the same options)", folder.train_file)
            return saved
    score = criterion(options["filter"])
    values = [score(record) for record in distilled_records(folder, manifest)] if score is not None else []
    kept = kept_pairs(values, options, sum(chunk_sizes(manifest)))
    source_lang, target_lang = manifest["data"]["source_lang"], manifest["data"]["target_lang"]
    stats = statistics_of(distilled_records(folder, manifest), kept, options, target_lang)
    with atomic_output(folder.train_file, "w", encoding="utf-8", newline="\n") as stream:
        originals = []
        for record, keep in zip(distilled_records(folder, manifest), kept, strict=True):
            if keep:
                stream.write(training_line(record["source"], record["translation"], source_lang, target_lang))
            if options["mix_original"] and added_back(record, keep):
                originals.append(training_line(record["source"], record["reference"], source_lang, target_lang))
        stream.writelines(originals)
    write_file_atomically(folder.stats, json.dumps(stats, indent=1, ensure_ascii=False) + "\n")
    logger.info("Distilled data: %s written: %s distilled pairs kept of %s, %s original pairs added",
                folder.train_file, f"{stats['kept']:,}", f"{stats['kept'] + stats['filtered_out']:,}",
                f"{stats['original_pairs_added']:,}")  # fmt: skip
    return stats


def added_back(record: dict, kept: bool) -> bool:
    """Whether --mix_original adds the record's original pair: it has a reference (a monolingual sentence has none)
    that differs from its kept translation."""
    return record["reference"] is not None and not (kept and record["reference"] == record["translation"])


def training_line(source: str, target: str, source_lang: str, target_lang: str) -> str:
    return json.dumps({"translation": {source_lang: source, target_lang: target}}, ensure_ascii=False) + "\n"


def criterion(name: str) -> Callable[[dict], float] | None:
    """What --filter `name` ranks a record by: the teacher's score, or sentence chrF of the translation against the
    reference (sacrebleu's default chrF); None for no filter."""
    if name == "teacher_score":
        return lambda record: record["score"]
    if name == "chrf":
        chrf = CHRF()
        return lambda record: chrf.sentence_score(record["translation"], [record["reference"]]).score
    return None


def kept_pairs(values: list[float], options: dict, pairs: int) -> list[bool]:
    """Which of the `pairs` pairs the filter keeps, from their `values`: those at or above --filter_threshold, or the
    best --filter_keep share (at least one pair; ties in file order); every pair without a filter."""
    if options["filter"] == "none":
        return [True] * pairs
    if options["filter_threshold"] is not None:
        return [value >= options["filter_threshold"] for value in values]
    count = max(1, math.ceil(options["filter_keep"] * len(values)))
    best = sorted(range(len(values)), key=lambda index: (-values[index], index))[:count]
    kept = [False] * len(values)
    for index in best:
        kept[index] = True
    return kept


def statistics_of(records: Iterator[dict], kept: list[bool], options: dict, target_lang: str) -> dict:
    """The distilled data's statistics (what stats.json and the report hold; BLEU tokenized for `target_lang`)."""
    scored, references, scores, words = [], [], [], {"source": 0, "translation": 0, "reference": 0}
    empty = identical = added = translated = 0
    for record, keep in zip(records, kept, strict=True):
        translated += 1
        scores.append(record["score"])
        empty += is_empty(record["translation"])
        added += options["mix_original"] and added_back(record, keep)
        if record["reference"] is None:  # a monolingual sentence
            continue
        scored.append(record["translation"])
        references.append(record["reference"])
        for side in words:
            words[side] += len(record[side].split())
        identical += record["translation"] == record["reference"]
    pairs = len(scored)
    return {
        "build": options, "pairs_translated": pairs, "monolingual_translated": translated - pairs,
        "kept": sum(kept), "filtered_out": translated - sum(kept), "original_pairs_added": added,
        "training_pairs": sum(kept) + added, "empty_translations": empty, "identical_to_reference": identical / pairs,
        "mean_teacher_score": sum(scores) / translated,
        "mean_words": {side: count / pairs for side, count in words.items()},  # of the training pairs
        "against_references": corpus_scores(scored, references, target_lang),
    }  # fmt: skip
