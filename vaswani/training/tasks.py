"""`--task`: what differs between translation and the language models, chosen once at set-up (`TASKS[args.task]`),
so that the loop never asks which: the options each task takes, its data and tokenizer, its model class, collators
and evaluation, the log line that tells the user what to do with the model. `Task` names what every task provides;
`TASKS` holds one of each (`--task` offers their names). `Run` holds what `set_up` builds.
"""

from __future__ import annotations

import abc
import argparse
import dataclasses
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from modeling_vaswani import (
    VaswaniConfig,
    VaswaniDecoderConfig,
    VaswaniEncoderConfig,
    VaswaniForCausalLM,
    VaswaniForConditionalGeneration,
    VaswaniForMaskedLM,
)
from modeling_vaswani.configuration_vaswani import MODEL_OPTIONS
from tokenization import train_bpe_tokenizer
from vaswani.constants import TOKENIZER_STAGING
from vaswani.data.batching import LanguageModelCollator, PairCollator, TokenBatchSampler, TokenCollator, collate
from vaswani.data.cleaning import CLEANING_OPTIONS, PairFilter
from vaswani.data.loading import load_translation_splits
from vaswani.data.prepared import load_prepared, read_manifest
from vaswani.data.text import (
    load_text_splits,
    mask_held_out,
    masked_token_targets,
    next_token_targets,
    tokenize_texts,
    training_texts,
)
from vaswani.data.tokenized import (
    cache_folder,
    column_array,
    ids_array,
    load_or_tokenize,
    load_or_train_tokenizer,
    pair_encoder,
    tokens_key,
    workers_for,
)
from vaswani.errors import DataError, UsageError
from vaswani.model_folder import check_tokenizer_fits, load_tokenizer
from vaswani.training.checkpoints import CheckpointManager, TrainingState
from vaswani.training.distributed import from_main_process, main_process_first
from vaswani.training.evaluation import evaluate_language_model, run_evaluation
from vaswani.training.run_dir import MetricsLog
from vaswani.training.speed import ComputeWeights, Recompilations, StepSpeed
from vaswani.training.stopping import StoppingRules

logger = logging.getLogger("train")  # one logger for the whole training run


def load_data(args, accelerator):
    """The splits of a translation run and their report (`load_translation_splits`): files, and a named dataset for
    the splits no file is given for. The built-in demo data beside the user's own files is said loudly: a config that
    names it (configs/demo.yaml) would otherwise validate or test a model of the user's data on numbers and dates."""
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    from_demo = [split for split, path in files.items() if not path] if args.dataset_name == "demo" else []
    if not accelerator.is_main_process:  # said once, not by every process of a multi-process run
        from_demo = []
    if len(from_demo) == len(files):
        logger.info("Using the built-in demo dataset (numbers, dates, quantities written out in English and German).")
    elif from_demo:
        logger.warning("dataset_name demo (as configs/demo.yaml sets it) gives the %s data: the built-in numbers and "
                       "dates, not yours; pass %s, or leave dataset_name out", " and ".join(from_demo),
                       " and ".join(f"--{split}_file" for split in from_demo))  # fmt: skip
    with main_process_first(accelerator, local=True):  # each node's main process builds the Arrow cache
        return load_translation_splits(
            train_file=args.train_file, validation_file=args.validation_file, test_file=args.test_file,
            dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name,
            source_lang=args.source_lang, target_lang=args.target_lang, validation_size=args.validation_size,
            seed=args.seed, cache_dir=args.cache_dir,
        )  # fmt: skip


def get_tokenizer(args, raw, output_dir: Path, accelerator, config: VaswaniConfig):
    """An existing tokenizer (--tokenizer, or the one this run saved before a resume), or a new shared BPE trained on
    the training data (`Task.train_tokenizer`: both sides of the pairs, or the text of an LM task). A new tokenizer
    is staged in output_dir/.tmp-tokenizer/ and moved into output_dir (part of the final model folder) by
    `start_new_run`, once every check has passed."""
    source = args.tokenizer or (output_dir if args.resume_from_checkpoint else None)
    if source is not None:
        tokenizer = load_tokenizer(source)  # tokenizer.json checked (a `{}` or garbage file is a clear error)
        if args.tokenizer and "vocab_size" in args.explicit and len(tokenizer) != args.vocab_size:
            given = "tokenizer" in args.explicit or args.tokenizer != args.model  # else --model's own (finish_args)
            which = f"--tokenizer {args.tokenizer}" if given else f"the tokenizer of --model {args.model}"
            raise UsageError(
                f"{which} has {len(tokenizer)} tokens but --vocab_size is {args.vocab_size} (on the command line or "
                "in --config): the model's vocabulary must match the tokenizer. Drop --vocab_size or use a matching "
                "tokenizer."
            )
        if args.model:
            check_tokenizer_fits(tokenizer, config, where=f"--tokenizer {source}", exact=True)
        TASKS[args.task].check_tokenizer(tokenizer, source)
        return tokenizer
    if args.model:
        raise UsageError(  # a model folder with a tokenizer is its own --tokenizer (`finish_args`)
            f"--model {args.model} has no tokenizer: pass --tokenizer with the tokenizer the model was trained with."
        )
    with main_process_first(accelerator):
        if accelerator.is_main_process:
            task = TASKS[args.task]

            def train():
                logger.info("Training a shared BPE tokenizer (vocab_size=%d) on the training data", args.vocab_size)
                return task.train_tokenizer(args, raw)

            tokenizer, folder, reused = load_or_train_tokenizer(
                raw["train"],
                {"task": task.name, **task.tokenizer_options(args)},
                args.cache_dir,
                train,
                load_tokenizer,
            )
            if reused:
                logger.info("Tokenizer: reused the BPE trained on the same text with the same options, %s; delete "
                            "it to train again", folder)  # fmt: skip
            staged = output_dir / TOKENIZER_STAGING  # moved into output_dir once every check has passed
            if staged.exists():
                shutil.rmtree(staged)
            staged.mkdir(parents=True)
            tokenizer.save_pretrained(staged)
        else:
            tokenizer = load_tokenizer(output_dir / TOKENIZER_STAGING)
    return tokenizer


def tokenize_splits(args, raw, tokenizer, accelerator):
    """input_ids and labels (EOS appended) per pair, over-long pairs dropped or truncated, lengths for batching;
    cached by what changes the tokens (vaswani/data/tokenized.py): the main process of each node tokenizes, or
    reuses the cache of an earlier run; the other processes only load it."""
    if args.prepared_data:  # vaswani prepare's tokens
        return load_prepared(args.prepared_data, read_manifest(args.prepared_data))[0]
    return tokenize_pairs(args, raw, tokenizer, accelerator)[0]


def tokenize_pairs(args, raw, tokenizer, accelerator) -> tuple[dict, dict]:
    """`tokenize_splits`, and per split the counts of over-long pairs and of the pairs dropped ({"overlong": N,
    "dropped": M}, and in train the counts of the cleaning filters that are on: "length_ratio", "copies",
    "duplicates", "held_out_sources"; vaswani/data/cleaning.py)."""
    src, tgt, overlong_policy = args.source_lang, args.target_lang, args.overlong
    cleaning = PairFilter.from_args(args)
    limits = {"input_ids": args.max_source_length, "labels": args.max_target_length}
    vocab_size, eos = len(tokenizer), tokenizer.eos_token_id

    def preprocess(batch: pa.Table, encode) -> pa.Table:
        # Arrow in, Arrow out: the token columns are built in their compact type (no cast pass, no attention masks)
        pairs = batch.column("translation").combine_chunks()
        ids = dict(zip(limits, encode(pairs.field(src).to_pylist(), pairs.field(tgt).to_pylist()), strict=True))
        lengths = {key: np.fromiter(map(len, ids[key]), np.int32, len(ids[key])) for key in limits}
        overlong = (lengths["input_ids"] > limits["input_ids"]) | (lengths["labels"] > limits["labels"])
        if overlong_policy == "truncate" and overlong.any():
            for key, limit in limits.items():
                for row in np.flatnonzero(lengths[key] > limit):
                    ids[key][row] = ids[key][row][: limit - 1] + [eos]
                np.minimum(lengths[key], limit, out=lengths[key])
        return pa.table({"input_ids": ids_array(ids["input_ids"], vocab_size),
                         "labels": ids_array(ids["labels"], vocab_size), "overlong": overlong,
                         "source_length": lengths["input_ids"], "target_length": lengths["labels"]})  # fmt: skip

    def tokenize_split(split, dataset, work):
        sample = dataset.select(range(min(len(dataset), 1000)))["translation"]  # where the fast encoder is checked
        encode = pair_encoder(tokenizer, [p[src] for p in sample], [p[tgt] for p in sample])
        mapped = dataset.with_format("arrow").map(
            preprocess, batched=True, remove_columns=dataset.column_names, fn_kwargs={"encode": encode},
            num_proc=workers_for(len(dataset), args.preprocessing_num_workers), desc=f"Tokenizing {split}",
            cache_file_name=str(work / f"{split}.arrow"), new_fingerprint=f"{folder.name}-{split}",
        ).with_format(None)  # fmt: skip
        overlong = column_array(mapped, "overlong")  # (num_pairs,) bool
        counts = {"overlong": int(overlong.sum())}
        drop = overlong if overlong_policy == "drop" and split == "train" else np.zeros_like(overlong)
        if split == "train":  # held-out pairs are never dropped: scores must cover the whole split
            flagged, cleaned = cleaning.drops(dataset, src, tgt, column_array(mapped, "source_length"),
                                              column_array(mapped, "target_length"),
                                              [raw[name] for name in raw if name != "train"])  # fmt: skip
            drop, counts = drop | flagged, {**counts, **cleaned}
        counts["dropped"] = int(drop.sum())
        if counts["dropped"]:
            mapped = mapped.filter(
                lambda rows: ~drop[rows], with_indices=True, input_columns=[], batched=True,
                cache_file_name=str(work / f"{split}-kept.arrow"), new_fingerprint=f"{folder.name}-{split}-kept",
            )  # fmt: skip
        return mapped.remove_columns("overlong"), counts

    options = {"task": "translation", "source_lang": src, "target_lang": tgt, "limits": limits,
               "overlong": overlong_policy, **cleaning.options()}  # fmt: skip
    key = from_main_process(accelerator, lambda: tokens_key(raw, tokenizer, options))
    folder = cache_folder(key, args.cache_dir)
    with main_process_first(accelerator, local=True):
        tokenized, counts, folder, reused = load_or_tokenize(
            raw, key, args.cache_dir, tokenize_split, may_build=accelerator.is_local_main_process,
            vocab_size=len(tokenizer),
        )  # fmt: skip
        log_cache(folder, reused, "text, tokenizer, length limits, --overlong and cleaning options")
        for split in raw:
            log_dropped(split, counts[split], limits, overlong_policy, cleaning)
        if len(tokenized["train"]) == 0:
            raise DataError(
                f"every training pair was dropped ({dropped_summary(counts['train'], limits, cleaning)}): raise "
                "--max_source_length/--max_target_length or relax the cleaning options."
            )
    return tokenized, counts


def dropped_summary(counts: dict, limits: dict, cleaning: PairFilter) -> str:
    """Why a split's pairs were dropped, in words: "3 over the limits {...}, 2 with a length ratio over 1.5, ..."
    (a pair two rules flag is counted by each)."""
    parts = [f"{counts['overlong']:,} over the limits {limits}"] if counts["overlong"] else []
    parts += [f"{counts[name]:,} {words}" for name, words, _ in cleaning.described() if name in counts]
    return ", ".join(parts)


def log_dropped(split: str, counts: dict, limits: dict, overlong_policy: str, cleaning: PairFilter) -> None:
    """The log lines of a split's dropped pairs and of its over-long pairs kept (truncated, or a held-out split's)."""
    keeps_overlong = overlong_policy == "truncate" or split != "train"
    if counts["dropped"]:
        why = dropped_summary({**counts, "overlong": 0} if keeps_overlong else counts, limits, cleaning)
        logger.info("%s: dropped %s pairs (%s)", split, f"{counts['dropped']:,}", why)
    if counts["overlong"] and keeps_overlong:
        logger.info("%s: %d pairs exceed the limits %s and were %s", split, counts["overlong"], limits,
                    "truncated" if overlong_policy == "truncate" else "kept for evaluation")  # fmt: skip


def log_cache(folder: Path, reused: bool, what: str) -> None:
    """The log line that says whether the tokenized splits were reused (and where the cache is)."""
    if reused:
        logger.info("Tokenized data: reused the cache %s (the same %s); delete it to tokenize again", folder, what)
    else:
        logger.info("Tokenized data: cached in %s; a run with the same %s reuses it", folder, what)


def vaswani_command() -> str:
    """The `vaswani` command as a user can type it: `vaswani` where the shell finds this installation's script, its
    path otherwise (`.venv/bin/vaswani` after `make demo`, whose environment is not activated in the user's shell),
    and `python -m vaswani.cli` where no script was installed."""
    script = Path(sys.executable).parent / "vaswani"
    found = shutil.which("vaswani")
    if found and script.exists() and Path(found).resolve() == script.resolve():
        return "vaswani"
    if not script.exists():
        return f"{sys.executable} -m vaswani.cli"
    relative = os.path.relpath(script)
    return str(script) if relative.startswith("..") else relative


class Task(abc.ABC):
    """What a `--task` provides, in the order `set_up` and the loop use it: its name and metrics, the checks of its
    options (at parsing), its data, tokenizer and model configuration, the tokenized splits and their batching,
    the collators, the tokens a batch scores, evaluation, and the closing advice. A new task subclasses this, fills
    in every abstract method and is added to `TASKS`."""

    name: str  # the value of --task
    examples: str  # what a training example is, for the log
    metrics: tuple[str, ...]  # the validation metrics (--metric_for_best), the default first
    model_class: type  # the model it trains, built from `model_config`
    random_collator = False  # its training collator draws random numbers: batches are made in the loop, not ahead

    # -- options (called by `parse_args`) ------------------------------------------------------------------------
    @abc.abstractmethod
    def check_args(self, args) -> None:
        """A `UsageError` for an option the user set (`args.explicit`) that this task does not take."""

    @abc.abstractmethod
    def check_data_args(self, args) -> None:
        """`check_args` for the data options alone (what `vaswani prepare` takes): the other tasks' are refused."""

    @abc.abstractmethod
    def check_lengths(self, args) -> None:
        """A `UsageError` for length and batch-size options that contradict each other."""

    def check_metric(self, args) -> None:
        """A `UsageError` when --metric_for_best is not one of this task's `metrics`."""
        if args.metric_for_best is not None and args.metric_for_best not in self.metrics:
            raise UsageError(f"--metric_for_best {args.metric_for_best} is not a metric of --task {self.name}; use "
                             f"one of {', '.join(self.metrics)}.")  # fmt: skip

    # -- data, tokenizer, model (called by `set_up`) -------------------------------------------------------------
    @abc.abstractmethod
    def load_data(self, args, accelerator) -> tuple[dict, str]:
        """The raw splits (name -> `datasets.Dataset`) and a summary of them for the log."""

    @abc.abstractmethod
    def tokenizer_options(self, args) -> dict:
        """What `train_tokenizer` passes to `train_bpe_tokenizer` besides the text (JSON values: the cache key)."""

    @abc.abstractmethod
    def train_tokenizer(self, args, raw):
        """A new shared BPE tokenizer trained on `raw["train"]` with `tokenizer_options`."""

    @abc.abstractmethod
    def check_tokenizer(self, tokenizer, source) -> None:
        """A `UsageError` when the given tokenizer (--tokenizer `source`) lacks what this task needs."""

    def model_config(self, config: VaswaniConfig):
        """The configuration of `model_class`, from the resolved encoder-decoder `config` (by default as it is)."""
        return config

    @abc.abstractmethod
    def tokenize(self, args, raw, tokenizer, accelerator) -> dict:
        """The tokenized splits (name -> `datasets.Dataset` with input_ids, labels and the lengths of `lengths`)."""

    @abc.abstractmethod
    def lengths(self, dataset) -> tuple:
        """The (source, target) lengths of every example of a tokenized split, for the token-budget batches."""

    @abc.abstractmethod
    def collators(self, args, tokenizer, model) -> tuple[object, object]:
        """The collators of (training, held-out) batches."""

    # -- training and evaluation (called by the loop) ----------------------------------------------------------
    @abc.abstractmethod
    def scored_tokens(self, batch: dict) -> int:
        """How many tokens of a collated batch the loss scores (the loss is their sum divided by the total)."""

    @abc.abstractmethod
    def evaluate(self, run: Run, split: str, max_samples: int | None, stop: Callable[[], bool] | None = None) -> dict:
        """The metrics of the model on a held-out split (at most `max_samples` examples); `stop`: the training loop's
        "has a stop signal come?", asked before each batch (`vaswani.training.evaluation.held_out_batches`)."""

    @abc.abstractmethod
    def usage(self, output_dir: Path) -> str:
        """The closing log line: how to use the trained model in `output_dir`."""


class TranslationTask(Task):
    """The paper's task: sentence pairs, `VaswaniForConditionalGeneration`, BLEU and chrF of beam-search output."""

    name = "translation"
    examples = "pairs"  # what a training example is, for the log
    metrics = ("bleu", "chrf", "loss")  # --metric_for_best, the default first
    model_class = VaswaniForConditionalGeneration

    def check_args(self, args) -> None:
        self.check_data_args(args)
        self.check_metric(args)

    def check_data_args(self, args) -> None:
        refuse_options(args, LM_OPTIONS, self.name, "it belongs to --task causal_lm / masked_lm")

    def check_lengths(self, args) -> None:
        if args.max_tokens < max(args.max_source_length, args.max_target_length):
            raise UsageError(
                f"--max_tokens {args.max_tokens} is smaller than the longest allowed pair "
                f"(--max_source_length {args.max_source_length}, --max_target_length {args.max_target_length}); "
                "raise --max_tokens or lower the length limits."
            )

    def load_data(self, args, accelerator) -> tuple[dict, str]:
        raw, report = load_data(args, accelerator)
        return raw, report.summary()

    def tokenizer_options(self, args) -> dict:
        return {"source_lang": args.source_lang, "target_lang": args.target_lang, "vocab_size": args.vocab_size,
                "min_frequency": args.min_frequency, "special_tokens_layout": args.special_tokens_layout,
                "model_max_length": args.max_position_embeddings or 1024}  # fmt: skip

    def train_tokenizer(self, args, raw):
        return train_bpe_tokenizer(dataset=raw["train"], **self.tokenizer_options(args))

    def check_tokenizer(self, tokenizer, source) -> None:
        pass  # any shared tokenizer translates

    def tokenize(self, args, raw, tokenizer, accelerator) -> dict:
        return tokenize_splits(args, raw, tokenizer, accelerator)

    def lengths(self, dataset) -> tuple:
        return column_array(dataset, "source_length"), column_array(dataset, "target_length")

    def collators(self, args, tokenizer, model) -> tuple[object, object]:
        collator = PairCollator(tokenizer, model)  # transformers' DataCollatorForSeq2Seq's batches, padded with numpy
        return collator, collator

    def scored_tokens(self, batch: dict) -> int:
        return int((batch["labels"] != -100).sum())

    def evaluate(self, run: Run, split: str, max_samples: int | None, stop: Callable[[], bool] | None = None) -> dict:
        return run_evaluation(
            run.args, run.accelerator, run.model, run.tokenized[split], run.raw[split], run.tokenizer, run.collator,
            max_samples=max_samples, stop=stop,
        )  # fmt: skip

    def usage(self, output_dir: Path) -> str:
        return f"Translate with it: echo 'Your sentence.' | {vaswani_command()} translate --model {output_dir}"


class CausalLMTask(Task):
    """A decoder-only next-token model (`VaswaniForCausalLM`) on text (vaswani/data/text.py): loss and perplexity
    over every next token of the held-out text."""

    name = "causal_lm"
    examples = "examples (blocks or lines)"
    metrics = ("loss", "perplexity")
    model_class = VaswaniForCausalLM
    config_class = VaswaniDecoderConfig
    mask_token = False  # whether its tokenizer needs <mask>
    targets = staticmethod(next_token_targets)

    def check_args(self, args) -> None:
        self.check_data_args(args)
        other_stack = [name for name in MODEL_OPTIONS if name not in {f.name for f in dataclasses.fields(
            self.config_class)}]  # fmt: skip
        refuse_options(args, other_stack, self.name, f"a {self.config_class.side}-only model takes the "
                       f"{self.config_class.side}_* and shared model options")  # fmt: skip
        if not self.mask_token:
            refuse_options(args, ["mlm_probability"], self.name, "it belongs to --task masked_lm")
        refuse_options(args, ["model"], self.name, "continuing a saved language model is not supported "
                       "yet; train from a preset and the model options")  # fmt: skip
        self.check_metric(args)

    def check_data_args(self, args) -> None:
        refuse_options(args, TRANSLATION_OPTIONS, self.name, "it belongs to --task translation; an LM reads text "
                       "(--text_column) in blocks of --block_size tokens")  # fmt: skip

    def check_lengths(self, args) -> None:
        if args.block_size < 2:
            raise UsageError(f"--block_size {args.block_size} is not allowed; use an integer of 2 or more.")
        if args.max_tokens < args.block_size:
            raise UsageError(f"--max_tokens {args.max_tokens} is smaller than --block_size {args.block_size}: a block "
                             "must fit in a batch. Raise --max_tokens or lower --block_size.")  # fmt: skip
        if not 0 < args.mlm_probability < 1:
            raise UsageError(f"--mlm_probability {args.mlm_probability} is not allowed; use a fraction in (0, 1).")

    def load_data(self, args, accelerator) -> tuple[dict, str]:
        with main_process_first(accelerator, local=True):  # each node's main process builds the Arrow cache
            raw, summary = load_text_splits(
                train_file=args.train_file, validation_file=args.validation_file, test_file=args.test_file,
                dataset_name=args.dataset_name, dataset_config_name=args.dataset_config_name,
                text_column=args.text_column, validation_size=args.validation_size, seed=args.seed,
                cache_dir=args.cache_dir,
            )  # fmt: skip
        return raw, "\n".join(summary)

    def tokenizer_options(self, args) -> dict:
        return {"vocab_size": args.vocab_size, "min_frequency": args.min_frequency,
                "special_tokens_layout": args.special_tokens_layout,
                "model_max_length": args.max_position_embeddings or 1024, "mask_token": self.mask_token}  # fmt: skip

    def train_tokenizer(self, args, raw):
        return train_bpe_tokenizer(iterator=training_texts(raw["train"]), **self.tokenizer_options(args))

    def check_tokenizer(self, tokenizer, source) -> None:
        if self.mask_token and tokenizer.mask_token is None:
            raise UsageError(f"--tokenizer {source} has no mask token, which --task {self.name} needs: train "
                             "one with `vaswani tokenizer --mask_token`, or leave --tokenizer out.")  # fmt: skip

    def model_config(self, config: VaswaniConfig):
        try:
            return self.config_class.from_seq2seq(config)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc

    def tokenize(self, args, raw, tokenizer, accelerator) -> dict:
        """Blocks of tokens, cached by what changes them (as `tokenize_splits`)."""
        if args.prepared_data:  # vaswani prepare's blocks
            return load_prepared(args.prepared_data, read_manifest(args.prepared_data))[0]

        def tokenize_split(split, dataset, work):
            return tokenize_texts({split: dataset}, tokenizer, block_size=args.block_size, packing=args.packing,
                                  num_proc=workers_for(len(dataset), args.preprocessing_num_workers),
                                  work_dir=work)[split], {}  # fmt: skip

        options = {"task": "language_model", "block_size": args.block_size, "packing": args.packing}
        key = from_main_process(accelerator, lambda: tokens_key(raw, tokenizer, options))
        with main_process_first(accelerator, local=True):
            tokenized, _, folder, reused = load_or_tokenize(
                raw, key, args.cache_dir, tokenize_split, may_build=accelerator.is_local_main_process,
                vocab_size=len(tokenizer),
            )  # fmt: skip
            log_cache(folder, reused, "text, tokenizer, --block_size and --packing")
        return tokenized

    def lengths(self, dataset) -> tuple:
        lengths = column_array(dataset, "length")  # an array: no Python int per block
        return lengths, lengths  # one sequence: a batch costs examples x its longest

    def collators(self, args, tokenizer, model) -> tuple[object, object]:
        collator = LanguageModelCollator(tokenizer)  # labels = input ids, PAD ignored (padded with numpy)
        return collator, collator

    def scored_tokens(self, batch: dict) -> int:
        return int((batch["labels"][:, 1:] != -100).sum())  # the first token of a row is never predicted

    def evaluate(self, run: Run, split: str, max_samples: int | None, stop: Callable[[], bool] | None = None) -> dict:
        args, accelerator, dataset = run.args, run.accelerator, run.tokenized[split]
        return evaluate_language_model(
            accelerator.unwrap_model(run.model), dataset,
            lambda indices: collate(dataset, indices, run.eval_collator, accelerator.device), accelerator,
            targets=self.targets, max_tokens=args.eval_max_tokens or args.max_tokens, max_samples=max_samples,
            stop=stop,
        )  # fmt: skip

    def usage(self, output_dir: Path) -> str:
        return f"Generate with it: pipeline('text-generation', model='{output_dir}') (docs/language-models.md)"


class MaskedLMTask(CausalLMTask):
    """An encoder-only masked LM (`VaswaniForMaskedLM`, BERT's objective): --mlm_probability of the tokens masked
    80/10/10 by `DataCollatorForLanguageModeling`; loss, perplexity and accuracy over the masked tokens."""

    name = "masked_lm"
    model_class = VaswaniForMaskedLM
    random_collator = True  # the masking (vaswani.data.prefetch: never in another thread)
    config_class = VaswaniEncoderConfig
    mask_token = True
    targets = staticmethod(masked_token_targets)

    def tokenize(self, args, raw, tokenizer, accelerator) -> dict:
        from transformers import DataCollatorForLanguageModeling

        tokenized = super().tokenize(args, raw, tokenizer, accelerator)
        for split in ("validation", "test"):  # fixed masks: every evaluation scores the same tokens
            if split in tokenized:
                seeded = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability,
                                                         seed=args.seed)  # fmt: skip
                tokenized[split] = mask_held_out(tokenized[split], seeded)
        return tokenized

    def collators(self, args, tokenizer, model) -> tuple[object, object]:
        from transformers import DataCollatorForLanguageModeling

        # training masks come from torch's global generator, which checkpoints save: a resume masks the same
        masking = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability)
        return masking, TokenCollator(tokenizer)  # held out: masked once at set-up, padded here

    def scored_tokens(self, batch: dict) -> int:
        return int((batch["labels"] != -100).sum())

    def usage(self, output_dir: Path) -> str:
        return f"Fill masks with it: pipeline('fill-mask', model='{output_dir}') (docs/language-models.md)"


TASKS: dict[str, Task] = {task.name: task for task in (TranslationTask(), CausalLMTask(), MaskedLMTask())}


LM_OPTIONS = ("text_column", "block_size", "packing", "mlm_probability")  # the LM tasks' own options


TRANSLATION_OPTIONS = ("source_lang", "target_lang", "max_source_length", "max_target_length", "overlong",
                       *CLEANING_OPTIONS, "num_beams", "length_penalty", "num_examples")  # fmt: skip


def refuse_options(args, names, task: str, fix: str) -> None:
    """`error:` for the first of `names` the user set (command line or YAML) that `--task task` does not take."""
    given = [name for name in names if name in args.explicit]
    if given:
        raise UsageError(f"--{given[0]} is not an option of --task {task}: {fix}.")


@dataclasses.dataclass
class Run:
    """Everything `set_up` builds for `train_loop` and `finish`."""

    args: argparse.Namespace  # parsed once by `parse_args`; nothing below changes it
    accelerator: object
    output_dir: Path
    task: Task  # --task: data, model class, collators, evaluation
    raw: dict  # split name -> `datasets.Dataset` of {"translation": {src: ..., tgt: ...}} (LM tasks: {"text": ...})
    tokenized: dict  # split name -> input_ids, attention_mask, labels, source_length, target_length (LM: length)
    tokenizer: object
    collator: object  # training batches
    eval_collator: object  # held-out batches (the masked LM's are masked once, at set-up)
    model: torch.nn.Module  # as prepared by accelerate (DDP-wrapped with several processes)
    training: TrainingState  # the unwrapped model, optimizer, schedules and progress: what a checkpoint holds
    sampler: TokenBatchSampler  # this process's training batches
    manager: CheckpointManager
    rules: StoppingRules  # time budget and early stopping
    metrics: MetricsLog
    speed: StepSpeed = dataclasses.field(default_factory=StepSpeed)  # the step's speed options, resolved
    # --bf16_weights: bfloat16 copies of the weights during an update (disabled: a no-op)
    compute_weights: ComputeWeights = dataclasses.field(default_factory=lambda: ComputeWeights(None, enabled=False))
    recompilations: Recompilations | None = None  # --torch_compile: graphs compiled since the start
    shapes_met: set = dataclasses.field(default_factory=set)  # (rows, source, target) of the batches trained on

    def evaluate(self, split: str, max_samples: int | None = None, stop: Callable[[], bool] | None = None) -> dict:
        return self.task.evaluate(self, split, max_samples, stop)
