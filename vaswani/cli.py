"""The `vaswani` command line: translate, export, push, average, prune, card, convert.

    vaswani translate --model DIR [--input FILE] [--output FILE] [--num_beams 4] [--length_penalty 0.6]
                      [--max_new_tokens N] [--paper_decoding] [--device auto] [--threads N] [--batch_tokens 4096]
                      [--backend auto|torch|ctranslate2] [--dtype float32|bfloat16|float16] [--parallel_batches N]
                      [--nbest N] [--scores] [--alignment] [--format text|jsonl]
    vaswani export    --model DIR --output OUT --format ctranslate2 [--quantization int8|int8_float32|int16|...]
    vaswani push      --model DIR --repo_id OWNER/NAME [--private] [--commit_message TEXT]
    vaswani average   --run_dir DIR --last 5 --output_dir OUT        (or --checkpoints CKPT ... --model DIR)
    vaswani prune     --model DIR --output_dir OUT --every_other 0.5  (or --encoder_layers_to_keep 0,2,4 ...)
    vaswani card      --model DIR [--repo_id OWNER/NAME] [--license apache-2.0] [--output FILE]
    vaswani convert   --from marian --model DIR --output OUT
    vaswani convert   --from fairseq --checkpoint model.pt --data_dir DICT_DIR --output OUT

Models are read from local folders only and checked before use (`vaswani.model_folder`); a folder's own Python code
runs only with `--trust_remote_code` (translate, push, prune, card; export and average never run it). `average` and
`prune` write into a non-empty folder only with `--overwrite` (its model files are replaced, other files kept); every
model folder and `--output` file is written under a temporary name and renamed when complete.

`translate` reads sentences from stdin or `--input`, one per line (UTF-8), and writes their translations in the same
order to stdout or `--output`, one per line: an empty line gives an empty line, and a line break inside a
translation becomes a space. Sentences are batched by length; a progress bar on stderr follows `--input` files.
Inputs longer than `--max_source_length` tokens (default: the model's max_position_embeddings) are truncated, with a
warning naming the line numbers. See `vaswani.inference.translator`.

`--nbest N`, `--scores`, `--alignment` and `--format jsonl` print n-best lists, model scores and word alignments
(see `vaswani.inference.outputs` for the line formats and `vaswani.inference.engines` for what scores and alignments
are). `--backend` picks PyTorch or CTranslate2 (by default: CTranslate2 for an exported folder), `--dtype` the
compute type.

`export --format ctranslate2` converts a model folder into a CTranslate2 folder with the tokenizer, optionally with
quantized weights (`--quantization int8`): a translation model for `translate`, a causal LM for
`ctranslate2.Generator`, an encoder-only model for `ctranslate2.Encoder`; see `vaswani.export.ctranslate2`.

`push` uploads a model folder (weights, config, generation config, tokenizer, modeling code for
`trust_remote_code`, training record and our model card) to the Hub in one commit; see `vaswani.hub.push`.
`average` averages checkpoints (Section 6.1 of the paper); see `vaswani.training.checkpoints`.
`prune` keeps some layers of a model trained with LayerDrop and writes an ordinary smaller model folder.
`card` renders the model card (README.md) of a folder.
`convert --from marian` turns a local MarianMTModel folder (OPUS-MT) into a vaswani model folder that computes the
same logits and translations, tokenizer included; `convert --from fairseq` does the same for a fairseq Transformer
checkpoint and its dictionaries; see `vaswani.convert`.

A user mistake prints `error: <message>` on stderr and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vaswani.constants import CONFIG_FILE, MODEL_CARD_FILE, RESULTS_FILE, RUN_ARGS_FILE, TOKENIZER_FILE_PATTERNS
from vaswani.devices import DTYPES
from vaswani.errors import ModelFolderError, UsageError, run_command
from vaswani.export.average import add_average_arguments, positive_int, run_average
from vaswani.export.ctranslate2 import QUANTIZATIONS
from vaswani.fileio import atomic_output, write_file_atomically
from vaswani.inference.engines import BACKENDS
from vaswani.inference.outputs import OUTPUT_FORMATS
from vaswani.model_folder import (
    add_output_folder_arguments,
    add_trust_remote_code,
    check_model_files,
    check_model_folder,
    check_output_folder,
    load_config,
    load_model_folder,
    write_model_folder,
)

EXPORT_FORMATS = ("ctranslate2",)
CONVERT_FORMATS = ("marian", "fairseq")  # vaswani.convert.CONVERTERS, without importing torch for the parser

PROG = "vaswani"
TRAIN_HELP = "train a model with the paper's recipe (the same as train.py)"
TOKENIZER_HELP = "train a shared BPE tokenizer on text files (both sides of the corpus)"


# ----------------------------------------------------------------------------------------------------------------
# translate
# ----------------------------------------------------------------------------------------------------------------
def run_translate(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm
    from transformers.utils import logging as hf_logging

    from vaswani.fileio import count_lines
    from vaswani.inference.translator import Translator

    if args.input is not None and not args.input.is_file():
        raise UsageError(f"no such input file: {args.input}")
    _check_output_file(args.output, inputs=[args.input], model=Path(args.model))
    hf_logging.disable_progress_bar()  # no "Loading weights" bar: the progress bar on stderr is ours
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)  # PyTorch's intra-op threads; CTranslate2 gets the same budget
    if args.nbest > args.num_beams:
        raise UsageError(f"--nbest {args.nbest} needs at least as many beams: add --num_beams {args.nbest}")
    translator = Translator(args.model, device=args.device, max_source_length=args.max_source_length,
                            trust_remote_code=args.trust_remote_code, backend=args.backend,
                            dtype=args.dtype, parallel_batches=args.parallel_batches)  # fmt: skip
    # n-best lists, scores, alignments or JSON lines: the formatted output of `format_hypotheses`
    detailed = args.nbest > 1 or args.scores or args.alignment or args.format == "jsonl"

    show_progress = args.input is not None and not args.no_progress
    bar = tqdm(total=count_lines(args.input) if show_progress else None, unit="line", file=sys.stderr,
               disable=not show_progress)  # fmt: skip

    def warn_truncated(line_numbers: list[int]) -> None:
        shown = ", ".join(map(str, line_numbers[:20])) + (" ..." if len(line_numbers) > 20 else "")
        message = (f"warning: line(s) {shown} are longer than {translator.max_source_length} tokens and were "
                   "truncated (see --max_source_length)")  # fmt: skip
        tqdm.write(message, file=sys.stderr)

    # The input is decoded line by line (an error names the line); the output goes to a temporary file renamed
    # when complete, so an error or a kill never leaves a half-written --output.
    try:
        _translate_stream(args, translator, bar, warn_truncated, detailed)
    finally:
        bar.close()  # first, so that an `error: ...` starts a line of its own
    return 0


def _translate_stream(args: argparse.Namespace, translator, bar, warn_truncated, detailed: bool) -> None:
    from vaswani.inference.outputs import format_hypotheses, one_line
    from vaswani.inference.translator import read_lines, translate_lines

    with _open_input(args.input) as source, _open_output(args.output) as sink:
        translations = translate_lines(
            translator,
            read_lines(source, name=str(args.input or "stdin")),
            buffer_lines=args.buffer_lines,
            progress=bar.update,
            on_truncated_lines=warn_truncated,
            num_beams=args.num_beams,
            length_penalty=args.length_penalty,
            max_new_tokens=args.max_new_tokens,
            paper_decoding=args.paper_decoding,
            batch_tokens=args.batch_tokens,
            **({"hypotheses": True, "nbest": args.nbest, "scores": args.scores, "alignment": args.alignment}
               if detailed else {}),
        )  # fmt: skip
        for index, translation in enumerate(translations):
            if detailed:
                for line in format_hypotheses(index, translation, args.format, scores=args.scores,
                                              alignment=args.alignment):  # fmt: skip
                    sink.write(line + "\n")
            else:
                sink.write(one_line(translation) + "\n")


@contextmanager
def _open_input(path: Path | None) -> Iterator[io.BufferedIOBase]:
    """The bytes of `path`, or of stdin when it is None (decoded line by line by `read_lines`)."""
    if path is None:
        yield sys.stdin.buffer
        return
    with open(path, "rb") as stream:
        yield stream


@contextmanager
def _open_output(path: Path | None) -> Iterator[io.TextIOBase]:
    """A UTF-8 text stream with "\\n" line breaks: to a temporary file renamed to `path` when the block completes
    (`atomic_output`), or to stdout when `path` is None."""
    if path is not None:
        with atomic_output(path, "w", encoding="utf-8", newline="\n") as stream:
            yield stream
        return
    sys.stdout.flush()  # whatever was printed before comes first
    stream = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
    try:
        yield stream
    finally:
        stream.flush()
        stream.detach()  # leave sys.stdout open


def _check_output_file(path: Path | None, inputs: list[Path | None], model: Path | None = None) -> None:
    """An output file must go into an existing folder and must not be one of the inputs (it would be emptied) nor a
    file of the `model` folder (when given: translate; a card is meant to go into its folder)."""
    if path is None:
        return
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: no such folder {path.parent}")
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder; give a file name")
    for source in inputs:
        if source is not None and path.exists() and os.path.samefile(source, path):
            raise UsageError(
                f"--output {path} is the input file {source}: writing it would destroy the input; give another file"
            )
    if model is not None and path.exists() and model.is_dir() and path.resolve().is_relative_to(model.resolve()):
        raise UsageError(f"--output {path} is a file of the model folder {model}: writing it would destroy the model; "
                         "give another file")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# export
# ----------------------------------------------------------------------------------------------------------------
def run_export(args: argparse.Namespace) -> int:
    from vaswani.errors import ExportError
    from vaswani.export.ctranslate2 import export_ctranslate2, usage_hint

    if args.output.exists() and args.output.resolve() == args.model.resolve():
        raise UsageError("--output must be a new folder, not the model folder itself")
    try:
        output = export_ctranslate2(args.model, args.output, quantization=args.quantization)
    except ExportError as error:
        raise UsageError(str(error)) from None
    print(f"wrote the CTranslate2 model ({args.quantization}) to {output}; {usage_hint(output)}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# push, card
# ----------------------------------------------------------------------------------------------------------------
def run_push(args: argparse.Namespace) -> int:
    from vaswani.hub.push import push_model_folder

    url = push_model_folder(args.model, args.repo_id, private=args.private, commit_message=args.commit_message,
                            trust_remote_code=args.trust_remote_code)  # fmt: skip
    print(f"pushed {args.model} to {url}")
    return 0


def run_card(args: argparse.Namespace) -> int:
    from vaswani.hub.model_card import render_model_card

    folder = args.model
    check_model_files(folder, need_tokenizer=False, trust_remote_code=args.trust_remote_code)
    output = args.output or folder / MODEL_CARD_FILE
    _check_output_file(output, inputs=[folder / name for name in (CONFIG_FILE, RUN_ARGS_FILE, RESULTS_FILE)])
    card = render_model_card(folder, repo_id=args.repo_id, license=args.license)
    write_file_atomically(output, str(card))
    print(f"wrote the model card to {output}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# prune
# ----------------------------------------------------------------------------------------------------------------
def run_prune(args: argparse.Namespace) -> int:
    """Load the model keeping only some layers (LayerDrop pruning, Fan et al. 2019) and save it as an ordinary
    smaller model with the tokenizer, the training arguments and a card that shows the pruning. The source's
    results.json is not copied: its scores belong to the full model."""
    from modeling_vaswani import every_other_layers_to_keep
    from vaswani.hub.model_card import write_model_card

    source = check_model_folder(args.model)
    if args.output_dir.exists() and args.output_dir.resolve() == source.resolve():
        raise UsageError("--output_dir must be a new folder, not the model folder itself")
    output = check_output_folder(args.output_dir, replace=args.overwrite)
    explicit = args.encoder_layers_to_keep is not None or args.decoder_layers_to_keep is not None
    if explicit == (args.every_other is not None):
        raise UsageError(
            "give either --every_other P or --encoder_layers_to_keep / --decoder_layers_to_keep (a comma list)"
        )
    if args.stacks is not None and args.every_other is None:
        raise UsageError("--stacks goes with --every_other")

    config = load_config(source, trust_remote_code=args.trust_remote_code)
    keep = {"encoder": args.encoder_layers_to_keep, "decoder": args.decoder_layers_to_keep}
    if args.every_other is not None:
        for stack in args.stacks or ["encoder", "decoder"]:
            keep[stack] = every_other_layers_to_keep(getattr(config, f"{stack}_layers"), args.every_other)
    pruning = {f"{stack}_layers_to_keep": layers for stack, layers in keep.items() if layers is not None}
    try:
        model, _ = load_model_folder(source, trust_remote_code=args.trust_remote_code, **pruning)
    except ModelFolderError:
        raise
    except ValueError as error:  # layer indices outside the model
        raise UsageError(str(error)) from None

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        for file in sorted(source.iterdir()):
            if file.is_file() and (file.name == RUN_ARGS_FILE or any(file.match(p) for p in TOKENIZER_FILE_PATTERNS)):
                shutil.copy2(file, folder / file.name)
        write_model_card(folder)

    write_model_folder(output, write, replace=args.overwrite)
    for stack, layers in keep.items():
        total = getattr(config, f"{stack}_layers")
        kept = f"layers {layers}" if layers is not None else "all layers"
        print(f"{stack}: kept {kept} of {total}")
    print(f"wrote the pruned model to {output}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# convert
# ----------------------------------------------------------------------------------------------------------------
def run_convert(args: argparse.Namespace) -> int:
    from vaswani.convert import CONVERTERS

    # --from marian reads a model folder; --from fairseq a checkpoint file and the folder of its dictionaries
    needed = ("model",) if args.source_format == "marian" else ("checkpoint", "data_dir")
    for name in ("model", "checkpoint", "data_dir"):
        given = getattr(args, name) is not None
        if given != (name in needed):
            raise UsageError(
                f"--from {args.source_format} {'needs' if name in needed else 'does not take'} --{name} (it takes "
                f"{' and '.join('--' + n for n in needed)})"
            )
    output = CONVERTERS[args.source_format](*(getattr(args, name) for name in needed), args.output)
    print(f"wrote the converted model to {output}; translate with: vaswani translate --model {output}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# The parser
# ----------------------------------------------------------------------------------------------------------------
def _layer_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer indices like 0,2,4, got {text!r}") from None


def _drop_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rate like 0.5, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"the LayerDrop rate must be in (0, 1), got {value}")
    return value


def _stacks(text: str) -> list[str]:
    stacks = [part.strip() for part in text.split(",") if part.strip()]
    if not stacks or set(stacks) - {"encoder", "decoder"}:
        raise argparse.ArgumentTypeError(f"expected encoder, decoder or encoder,decoder, got {text!r}")
    return stacks


# The options of `vaswani translate` after --model and --trust_remote_code, in the order --help lists them.
TRANSLATE_OPTIONS = {
    "--input": dict(type=Path, metavar="FILE", help="read sentences from FILE (default: stdin)"),
    "--output": dict(type=Path, metavar="FILE", help="write translations to FILE (default: stdout)"),
    "--num_beams": dict(type=positive_int, default=4, metavar="K", help="beam size (paper: 4)"),
    "--length_penalty": dict(type=float, default=0.6, metavar="ALPHA", help="paper: 0.6"),
    "--max_new_tokens": dict(type=positive_int, metavar="N", help="at most N output tokens (default: source + 50)"),
    "--paper_decoding": dict(
        action="store_true",
        help="the paper's beam search: the GNMT length penalty ((5 + |Y|) / 6) ** alpha (generate()'s length_penalty "
             "divides by |Y| ** alpha) and a cap of source length + 50 per sentence",
    ),
    "--device": dict(default="auto", help="auto (a GPU if there is one), cpu, cuda or cuda:N"),
    "--threads": dict(
        type=positive_int, metavar="N",
        help="CPU threads for decoding (default: PyTorch's, one per core unless OMP_NUM_THREADS says otherwise)",
    ),
    "--batch_tokens": dict(type=positive_int, default=4096, metavar="N", help="source tokens per batch, padding included"),
    "--max_source_length": dict(
        type=positive_int, metavar="N",
        help="truncate longer inputs to N tokens, with a warning (default: the model's max_position_embeddings)",
    ),
    "--buffer_lines": dict(
        type=positive_int, default=10000, metavar="N", help="lines read, sorted by length and translated at a time"
    ),
    "--no_progress": dict(action="store_true", help="no progress bar for --input files"),
    "--backend": dict(
        choices=BACKENDS, default="auto",
        help="auto: CTranslate2 for a folder written by `vaswani export --format ctranslate2`, PyTorch otherwise",
    ),
    "--dtype": dict(
        choices=DTYPES, default="float32",
        help="compute type: bfloat16/float16 run PyTorch under autocast and CTranslate2 in that type; refused where "
             "the device has no native support (on CPU: bfloat16 needs AVX512-BF16 or AMX)",
    ),
    "--parallel_batches": dict(
        type=positive_int, metavar="N",
        help="ctranslate2 backend: decode each batch as N parts at once, each on threads / N cores (default: one part "
             "per core on CPU, CTranslate2's throughput setting; 1 on GPU)",
    ),
    "--nbest": dict(
        type=positive_int, default=1, metavar="N",
        help="print the N best translations of each line (needs --num_beams >= N), as `LINE ||| TRANSLATION` lines",
    ),
    "--scores": dict(
        action="store_true",
        help="add each translation's score: sum of token log-probabilities / length ** length_penalty "
             "(`LINE ||| TRANSLATION ||| SCORE`)",
    ),
    "--alignment": dict(
        action="store_true",
        help="add word alignments `i-j` (source word i, target word j, from 0) from the last decoder layer's "
             "encoder-decoder attention averaged over heads (each target subword -> its most attended source subword)",
    ),
    "--format": dict(
        choices=OUTPUT_FORMATS, default="text",
        help="text (one line per translation, or ` ||| `-separated fields with --nbest/--scores/--alignment) or "
             "jsonl (one JSON object per input line: {line, hypotheses: [{text, score, alignment}]})",
    ),
}  # fmt: skip


def _add_command(commands, name: str, run, help: str, description: str) -> argparse.ArgumentParser:
    """The subcommand `name` (no abbreviated options), whose parsed arguments go to `run`."""
    command = commands.add_parser(name, allow_abbrev=False, help=help, description=description)
    command.set_defaults(run=run)
    return command


def _add_model_argument(command: argparse.ArgumentParser, help: str = "the model folder") -> None:
    command.add_argument("--model", required=True, type=Path, metavar="DIR", help=help)


def _add_export_command(commands) -> None:
    """`vaswani export`: the three model families, each to the CTranslate2 model that runs it."""
    export = _add_command(
        commands, "export", run_export, help="export a model folder for a fast inference engine (CTranslate2)",
        description="Convert a model folder into a CTranslate2 model folder (with the tokenizer). A translation "
                    "model (VaswaniForConditionalGeneration) runs with `vaswani translate --model OUT`; a causal LM "
                    "(VaswaniForCausalLM) becomes a decoder-only model for ctranslate2.Generator, an encoder-only "
                    "model (VaswaniEncoderModel, VaswaniForMaskedLM: the encoder, without the masked-LM head) an "
                    "encoder model for ctranslate2.Encoder; VaswaniForSequenceClassification is refused (CTranslate2 "
                    "cannot run its head). Needs pip install \"vaswani[ct2]\".",
    )  # fmt: skip
    _add_model_argument(export)
    export.add_argument("--output", required=True, type=Path, metavar="OUT", help="the new folder to write")
    export.add_argument("--format", choices=EXPORT_FORMATS, default="ctranslate2", help="ctranslate2 (the only one)")
    export.add_argument(
        "--quantization", choices=QUANTIZATIONS, default="float32",
        help="weight type of the export: int8 (8-bit weights, float32 elsewhere: the fastest on CPU), int8_float32, "
             "int16, float16, bfloat16, float32",
    )  # fmt: skip


def _add_convert_command(commands) -> None:
    """`vaswani convert --from marian|fairseq`."""
    convert = _add_command(
        commands, "convert", run_convert,
        help="convert a pretrained Marian (OPUS-MT) model or fairseq Transformer into a vaswani model folder",
        description="Convert a local MarianMTModel folder (an OPUS-MT model: config.json, model.safetensors or "
                    "pytorch_model.bin, source.spm, target.spm, vocab.json) into a vaswani model folder with the same "
                    "logits and translations, its tokenizer, generation config and a model card naming the source; or a "
                    "fairseq Transformer checkpoint (--checkpoint) with the dict.LANG.txt files of --data_dir.",
    )  # fmt: skip
    convert.add_argument(
        "--from", dest="source_format", required=True, choices=CONVERT_FORMATS, help="the source model's kind"
    )
    convert.add_argument(
        "--model", type=Path, metavar="DIR", help="--from marian: the model folder (local; download a Hub model first)"
    )
    convert.add_argument(
        "--checkpoint", type=Path, metavar="FILE", help="--from fairseq: the checkpoint (model.pt, checkpoint_best.pt)"
    )
    convert.add_argument(
        "--data_dir", type=Path, metavar="DIR", help="--from fairseq: the folder of its dict.LANG.txt dictionaries"
    )
    convert.add_argument(
        "--output", required=True, type=Path, metavar="OUT", help="the new (or empty) folder to write"
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; the options of `command` (the first argument) are filled in even where they
    need heavy imports, so that `vaswani --help` and the light commands start fast."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    translate = _add_command(
        commands, "translate", run_translate, help="translate sentences, one per line",
        description="Translate sentences from stdin or --input (one per line, UTF-8) into the same number of lines.",
    )  # fmt: skip
    _add_model_argument(translate, help="a saved model folder with its tokenizer (local)")
    add_trust_remote_code(translate)
    for flag, settings in TRANSLATE_OPTIONS.items():
        translate.add_argument(flag, **settings)

    _add_export_command(commands)

    push = _add_command(
        commands, "push", run_push, help="upload a model folder to the Hugging Face Hub with its model card",
        description="Upload weights, config, generation config, tokenizer, modeling code and the folder's README.md "
                    "(render it for the repo first with `vaswani card --repo_id`; a folder without one gets a card "
                    "rendered for the repo) in one commit. Checkpoints and logs stay local.",
    )  # fmt: skip
    _add_model_argument(push)
    push.add_argument("--repo_id", required=True, metavar="ID", help="NAME or OWNER/NAME on the Hub")
    push.add_argument("--private", action="store_true", help="create the repository as private")
    push.add_argument("--commit_message", metavar="TEXT", help="the commit message")
    add_trust_remote_code(push)

    # `vaswani train ...` goes to `vaswani.train.run` before this parser (its options come from --config YAML too);
    # listed here for `vaswani --help`.
    commands.add_parser("train", help=TRAIN_HELP + " (see vaswani train --help)")

    tokenizer = commands.add_parser(
        "tokenizer", allow_abbrev=False, help=TOKENIZER_HELP,
        description=TOKENIZER_HELP + ", saved as a tokenizer folder that AutoTokenizer loads",
    )  # fmt: skip
    if command == "tokenizer":  # its options need the tokenizers/transformers imports: only when it runs
        from tokenization.__main__ import add_tokenizer_arguments, run_tokenizer

        tokenizer.set_defaults(run=run_tokenizer)
        add_tokenizer_arguments(tokenizer)

    average = _add_command(
        commands, "average", run_average,
        help="average the last checkpoints of a run into a model folder (paper: 5 for base, 20 for big)",
        description="Average checkpoints into a complete save_pretrained model folder (fairseq semantics; Section "
                    "6.1 of the paper).",
    )  # fmt: skip
    add_average_arguments(average)

    prune = _add_command(
        commands, "prune", run_prune, help="keep some layers of a LayerDrop model (a smaller model folder)",
        description="Prune a model trained with LayerDrop (Fan et al. 2019) to the given layers and save it as an "
                    "ordinary smaller model, with its tokenizer and a model card that shows the pruning.",
    )  # fmt: skip
    _add_model_argument(prune, help="the full model folder")
    add_output_folder_arguments(prune, "the pruned model")
    add_trust_remote_code(prune)
    prune.add_argument("--encoder_layers_to_keep", type=_layer_list, metavar="I,J,...", help="e.g. 0,2,4")
    prune.add_argument("--decoder_layers_to_keep", type=_layer_list, metavar="I,J,...", help="e.g. 0,2,4")
    prune.add_argument(
        "--every_other", type=_drop_rate, metavar="P",
        help="the paper's 'every other' strategy for LayerDrop rate P: drop depth d where d = 0 mod floor(1/P)",
    )  # fmt: skip
    prune.add_argument(
        "--stacks", type=_stacks, metavar="STACKS", help="with --every_other: encoder,decoder (default)"
    )

    card = _add_command(
        commands, "card", run_card, help="render the model card (README.md) of a model folder",
        description="Render the model card from the folder's config.json, run_args.json and results.json.",
    )  # fmt: skip
    _add_model_argument(card)
    card.add_argument(
        "--repo_id", metavar="ID", help="the Hub name used in the card's examples (default: folder name)"
    )
    card.add_argument(
        "--license",
        help="license identifier (default: that of the model a converted folder came from, else apache-2.0)",
    )
    card.add_argument("--output", type=Path, metavar="FILE", help="where to write the card (default: DIR/README.md)")
    add_trust_remote_code(card)

    _add_convert_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 with an `error: ...` line for a user mistake)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        from vaswani.training.loop import run as run_train

        try:
            return run_train(argv[1:], prog=f"{PROG} train")
        except SystemExit as exit_:  # --help (status 0) or argparse's own usage error (status 2)
            return int(exit_.code or 0)
    try:
        args = build_parser(argv[0] if argv else None).parse_args(argv)
    except SystemExit as exit_:  # argparse printed the usage and "error: ..." (status 2), or the help (status 0)
        return int(exit_.code or 0)
    return run_command(lambda: args.run(args))


if __name__ == "__main__":
    sys.exit(main())
