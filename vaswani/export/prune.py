"""Pruning a model: load it keeping only some layers of each stack (a model trained with LayerDrop, Fan et al. 2019, or
a teacher cut to a student's depth, "shrink and fine-tune", Shleifer & Rush 2020) and/or the first tokens of its BPE
vocabulary (`tokenization.bpe.first_tokens`: the same ids, fewer merges; the embedding keeps its first rows), and save
it as an ordinary smaller model folder with the tokenizer, the training arguments and a card that shows the pruning.
The source's results.json is not copied: its scores belong to the full model."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from modeling_vaswani import every_other_layers_to_keep
from tokenization.bpe import first_tokens
from tokenization.errors import TokenizerError
from vaswani.constants import TOKENIZER_FILE
from vaswani.errors import ModelFolderError, UsageError
from vaswani.hub.model_card import write_model_card
from vaswani.model_folder import (
    check_model_folder,
    check_output_folder,
    copy_tokenizer_and_run_args,
    is_source_record,
    load_config,
    load_model_folder,
    write_model_folder,
)


def prune_model_folder(
    model: str | Path, output_dir: str | Path, *, encoder_layers_to_keep: list[int] | None = None,
    decoder_layers_to_keep: list[int] | None = None, every_other: float | None = None,
    stacks: list[str] | None = None, vocab_size: int | None = None, overwrite: bool = False,
    trust_remote_code: bool = False,
) -> tuple[Path, dict[str, tuple]]:  # fmt: skip
    """Write the pruned model of `model` to `output_dir`: the given layers of each stack, or the paper's "every
    other" layers for LayerDrop rate `every_other` (of `stacks`, default both), and/or the first `vocab_size` tokens
    of its vocabulary. Returns the output folder and, per stack, (the layers kept or None for all, the number of
    layers it had), and under "vocabulary" (the tokens kept or None for all, the number it had)."""
    source = check_model_folder(model)
    output_dir = Path(output_dir)
    if output_dir.exists() and output_dir.resolve() == source.resolve():
        raise UsageError("--output_dir must be a new folder, not the model folder itself")
    output = check_output_folder(output_dir, replace=overwrite)
    explicit = encoder_layers_to_keep is not None or decoder_layers_to_keep is not None
    if explicit and every_other is not None or not (explicit or every_other is not None or vocab_size is not None):
        raise UsageError(
            "give either --every_other P or --encoder_layers_to_keep / --decoder_layers_to_keep (a comma list), "
            "and/or --vocab_size N"
        )
    if stacks is not None and every_other is None:
        raise UsageError("--stacks goes with --every_other")

    config = load_config(source, trust_remote_code=trust_remote_code)
    keep = {"encoder": encoder_layers_to_keep, "decoder": decoder_layers_to_keep}
    if every_other is not None:
        for stack in stacks or ["encoder", "decoder"]:
            keep[stack] = every_other_layers_to_keep(getattr(config, f"{stack}_layers"), every_other)
    pruning = {f"{stack}_layers_to_keep": layers for stack, layers in keep.items() if layers is not None}
    if vocab_size is not None:  # the tokenizer cut first: a size it refuses costs no model load
        tokenizer_file = source / TOKENIZER_FILE
        if not tokenizer_file.is_file():
            raise UsageError(f"--vocab_size: {source} has no {TOKENIZER_FILE} to cut")
        try:
            tokenizer = first_tokens(Tokenizer.from_file(str(tokenizer_file)), vocab_size)
        except TokenizerError as error:
            raise UsageError(f"--vocab_size: {error}") from error
    try:
        pruned, _ = load_model_folder(source, trust_remote_code=trust_remote_code, **pruning)
    except ModelFolderError:
        raise
    except ValueError as error:  # layer indices outside the model
        raise UsageError(str(error)) from error
    if vocab_size is not None:
        pruned.resize_token_embeddings(vocab_size)  # the first rows of the (tied) embeddings; config.vocab_size too

    def write(folder: Path) -> None:
        pruned.save_pretrained(folder)
        copy_tokenizer_and_run_args(source, folder)
        if vocab_size is not None:
            tokenizer.save(str(folder / TOKENIZER_FILE))
        write_model_card(folder, repo_id=output.resolve().name)  # the output folder's name, not the staging folder's

    write_model_folder(output, write, replace=overwrite, replaces=is_source_record)
    kept = {stack: (layers, getattr(config, f"{stack}_layers")) for stack, layers in keep.items()}
    return output, {**kept, "vocabulary": (vocab_size, config.vocab_size)}
