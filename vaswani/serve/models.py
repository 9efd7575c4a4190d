"""The models a server answers with: one entry per language pair, loaded once at start-up from the folders given.

`--model [SRC-TGT=]DIR` names a folder and, optionally, its language pair; without `SRC-TGT=` the pair is read from
the folder's training arguments (`run_args.json`: `source_lang`, `target_lang`, written by `vaswani train`). A
folder whose pair cannot be told (a CTranslate2 export, a converted model) is a start-up error that says to write
`SRC-TGT=DIR`. Language codes are letters, digits and `_` (`en`, `pt_BR`, `zh_Hant`): the `-` separates the pair.

Requests choose a model by its pair only: a path from a request never reaches the file system.

Two folders for one pair are an ensemble (as repeated `--model` in `vaswani translate`): the table keeps every
folder of a pair (`ServedPair.folders`) and `load` builds one translator from them (the mean of their
log-probabilities; a CTranslate2 folder or two tokenizers are refused at start-up by `Translator`).

One folder for several pairs is loaded once and shared (`ServedPair.model`: its key): a multilingual model
(`--model en-es=DIR --model en-fr=DIR` with a multilingual OPUS-MT model) has a token for each language it translates
into (`>>es<<`, `Translator.target_languages`), which goes before each sentence of its pair
(`ServedPair.target_language`); a pair whose target has no token in such a model is a start-up error naming the ones
it has. `--model SRC-*=DIR` serves every language the model has a token for (`en-*=DIR`: en-es, en-fr, ..., the
source's own language left out). A model without those tokens translates a source into one language (en-de and
de-en from one model trained on both directions; several sources into one target), never one source into two. The
log says which pairs each model serves.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaswani.constants import CONFIG_FILE, RUN_ARGS_FILE
from vaswani.errors import UsageError
from vaswani.inference.translator import (
    canonical_language,
    find_language_code,
    target_languages_of,
    unknown_target_language,
)
from vaswani.model_folder import load_tokenizer

LANGUAGE_CODE = r"[A-Za-z][A-Za-z0-9_]{0,15}"
PAIR_PREFIX = re.compile(rf"^({LANGUAGE_CODE})-({LANGUAGE_CODE})=(.+)$", flags=re.DOTALL)
EVERY_TARGET = "*"  # `--model SRC-*=DIR`: every target language of a multilingual model
EVERY_TARGET_PREFIX = re.compile(rf"^({LANGUAGE_CODE})-\*=(.+)$", flags=re.DOTALL)
logger = logging.getLogger("vaswani.serve")


@dataclass(frozen=True)
class ModelSpec:
    """One `--model` value: a folder and, when given, its pair."""

    folder: Path
    pair: tuple[str, str] | None = None


def parse_model_spec(text: str, flag: str = "--model", every_target: bool = False) -> ModelSpec:
    """`SRC-TGT=DIR` or `DIR` (the value of `flag`: serve's `--model`, distill's `--teacher`); with `every_target`,
    `SRC-*=DIR` too (its pair's target is `EVERY_TARGET`, `load_models` expands it)."""
    if every_target and (match := EVERY_TARGET_PREFIX.match(text)):
        return ModelSpec(Path(match.group(2)), (match.group(1), EVERY_TARGET))
    match = PAIR_PREFIX.match(text)
    if match and match.group(1) == match.group(2):
        raise UsageError(f"{flag} {text}: the source and target language are both {match.group(1)!r}")
    if match:
        return ModelSpec(Path(match.group(3)), (match.group(1), match.group(2)))
    return ModelSpec(Path(text))


def pair_from_training_arguments(folder: Path, flag: str = "--model", fix: str | None = None) -> tuple[str, str]:
    """The (source, target) language codes of `folder` from its run_args.json, or a `UsageError` that ends with
    `fix`: by default how to name the pair on the command line (`flag SRC-TGT=DIR`)."""
    fix = fix or f"name the pair on the command line: {flag} SRC-TGT={folder} (e.g. en-de={folder})"
    path = folder / RUN_ARGS_FILE
    if not path.is_file():
        raise UsageError(f"the language pair of {folder} cannot be told: it has no {RUN_ARGS_FILE}; {fix}")
    try:
        run_args = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UsageError(f"{path} cannot be read ({error}); {fix}") from None
    pair = (run_args.get("source_lang"), run_args.get("target_lang")) if isinstance(run_args, dict) else (None, None)
    if not all(isinstance(code, str) and re.fullmatch(LANGUAGE_CODE, code) for code in pair) or pair[0] == pair[1]:
        raise UsageError(f"{path} names no usable language pair (source_lang={pair[0]!r}, target_lang={pair[1]!r}); "
                         f"{fix}")  # fmt: skip
    return pair


def trained_pair(folder: Path) -> tuple[str, str] | None:
    """The (source, target) language codes of `folder` from its run_args.json, or None where it names no usable
    pair (a converted model, an export of one)."""
    try:
        return pair_from_training_arguments(folder)
    except UsageError:
        return None


@dataclass
class ServedPair:
    """A language pair and what translates it: the folders given for it (several: an ensemble) and the loaded
    translator (a `vaswani.inference.translator.Translator`)."""

    source: str
    target: str
    folders: list[Path]
    translator: Any = None
    count_tokens: Callable[[Sequence[str]], list[int]] = field(default=lambda texts: [len(t.split()) for t in texts])
    # the key of the translator, shared by the pairs one model serves (`load_models`), and the code of the token
    # that tells a multilingual model this pair's target language (None for a model of one target language)
    model: Hashable = None
    target_language: str | None = None


def group_by_pair(specs: Sequence[ModelSpec]) -> dict[tuple[str, str], list[Path]]:
    """The folders of each pair, in command-line order; every folder is checked to exist first, and `SRC-*=DIR`
    stands for a pair per target language of the folder's model (`every_target`)."""
    for spec in specs:
        if not spec.folder.is_dir():
            raise UsageError(f"--model {spec.folder}: no such folder")
        if not (spec.folder / CONFIG_FILE).is_file():  # before its pair: naming one would not make it a model
            raise UsageError(f"--model {spec.folder} is not a model folder (no {CONFIG_FILE}): give a folder that "
                             "vaswani train, convert, average or export wrote")  # fmt: skip
    pairs: dict[tuple[str, str], list[Path]] = {}
    for spec in specs:
        if spec.pair is not None and spec.pair[1] == EVERY_TARGET:
            for target in every_target(spec.folder, spec.pair[0]):
                pairs.setdefault((spec.pair[0], target), []).append(spec.folder)
            continue
        pair = spec.pair or pair_from_training_arguments(spec.folder)
        pairs.setdefault(pair, []).append(spec.folder)
    return pairs


def every_target(folder: Path, source: str) -> list[str]:
    """The target languages of `--model SRC-*=DIR`: the codes of the model's target-language tokens (read from its
    tokenizer alone), the source's own left out (in any spelling: `canonical_language`); a `UsageError` for a model
    without them."""
    targets = sorted(target_languages_of(load_tokenizer(folder, light=True).get_vocab()))
    if not targets:
        raise UsageError(f"--model {source}-*={folder}: the model has no target-language tokens (>>xx<<, which a "
                         "multilingual OPUS-MT model has) to serve every target of; name its pair: "
                         f"--model {source}-TGT={folder}")  # fmt: skip
    return [target for target in targets if canonical_language(target) != canonical_language(source)]


def load_models(specs: Sequence[ModelSpec], load: Callable[[list[Path]], Any]) -> dict[tuple[str, str], ServedPair]:
    """The table of pairs: `load(folders)` gives the translator of one pair (its folders, several for an ensemble),
    called once for folders that serve several pairs; a multilingual model's pairs get their target's token."""
    table, loaded = {}, {}
    for (source, target), folders in group_by_pair(specs).items():
        key = tuple(folder.resolve() for folder in folders)
        if key not in loaded:
            translator = load(folders)
            loaded[key] = translator, token_counter(translator.tokenizer)
        translator, count_tokens = loaded[key]
        table[(source, target)] = ServedPair(source, target, folders, translator, count_tokens, key,
                                             pair_target_language(translator.target_languages, target, folders[0]))  # fmt: skip
    for key, (translator, _) in loaded.items():  # without target tokens, a source has one target (en-de, de-en)
        served = [served for served in table.values() if served.model == key]
        for source in sorted({one.source for one in served}):
            targets = sorted(one.target for one in served if one.source == source)
            if len(targets) > 1 and not translator.target_languages:
                raise UsageError(f"--model {served[0].folders[0]} is given for {source} into {' and '.join(targets)}, "
                                 "but it has no target-language tokens (>>xx<<, which a multilingual OPUS-MT model "
                                 "has) to choose one: give it the pairs it was trained on only")  # fmt: skip
        logger.info("%s serves %s", " + ".join(str(folder) for folder in served[0].folders),
                    ", ".join(f"{one.source}-{one.target}" for one in served))  # fmt: skip
    return table


def pair_target_language(known: Mapping[str, int], target: str, folder: Path, flag: str = "--model") -> str | None:
    """The code of the token that makes the model of `folder` (given as `flag`), whose target-language tokens are
    `known` (`Translator.target_languages`), translate into `target` (as the model spells it, `find_language_code`:
    `--model en-es=DIR` for a model of `>>spa<<` tokens); None when it has no such tokens; a `UsageError` when it has
    some but not this one."""
    if not known:
        return None
    code = find_language_code(target, known)
    if code is None:
        raise UsageError(unknown_target_language(f"{flag} {folder} for the target {target}", known))
    return code


def token_counter(tokenizer) -> Callable[[Sequence[str]], list[int]]:
    """The number of tokens of each text, for the batch budget, counted with a copy of the tokenizer of its own: the
    decoding threads use the original at the same time, and neither a fast tokenizer (its Rust tokenizer: copied
    from its JSON) nor a MarianTokenizer (it switches between its two sentencepiece models to encode a target:
    deep-copied) may be used by two threads at once."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        from tokenizers import Tokenizer

        rust = Tokenizer.from_str(backend.to_str())
        rust.no_truncation()
        rust.no_padding()
        return lambda texts: [len(encoding.ids) for encoding in rust.encode_batch(list(texts))]
    own = copy.deepcopy(tokenizer)
    return lambda texts: [len(ids) for ids in own(list(texts), verbose=False)["input_ids"]]  # counted, not decoded
