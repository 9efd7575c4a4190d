"""Evaluation during and after training: validation/test loss, BLEU and chrF of beam-search translations through
`evaluate` (the local metric scripts of `vaswani.metrics`), gathered across processes; a language model's loss,
perplexity and accuracy.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator

import datasets
import torch

from modeling_vaswani.generation_vaswani import beam_options
from vaswani.data.batching import TokenBatchSampler, collate
from vaswani.devices import default_batch_tokens
from vaswani.metrics import corpus_scores
from vaswani.training.distributed import main_process_decides

logger = logging.getLogger("train")  # one logger for the whole training run


@contextlib.contextmanager
def evaluation_mode(model) -> Iterator[None]:
    """`model.eval()` within the block (no dropout, LayerDrop or DropHead); the mode before comes back after it, also
    when an evaluation stops (`EvaluationStopped`). Layers compiled by --torch_compile run eagerly within it: the
    compiled graphs are the training step's, and compiling an evaluation's own (eval mode, beam search with its
    growing cache, each split's shapes) took longer than the evaluation itself (benchmarks/README.md)."""
    was_training = model.training
    model.eval()
    try:
        with torch.compiler.set_stance("force_eager"):
            yield
    finally:
        model.train(was_training)


class EvaluationStopped(Exception):
    """A stop signal (Ctrl-C, SIGTERM) came during an evaluation during training: what it had computed is dropped, so
    that the checkpoint is saved at once; the checkpoint says the evaluation is due and a resume runs it first."""


def held_out_batches(sampler: TokenBatchSampler, accelerator, stop: Callable[[], bool] | None) -> Iterator[list[int]]:
    """This process's batches of a held-out split (`sampler`: one epoch, unshuffled). With `stop` (the training
    loop's "has a stop signal come?"), the main process's answer is asked before each batch, and
    `EvaluationStopped` is raised on every process when it is yes: a preempted machine's grace period (often 30 s)
    or a person's Ctrl-C waits for the batch under way, not for a whole evaluation, which can take minutes.

    Processes hold different numbers of batches (`even_batches=False`), so each asks as many times as the process
    with the most: the question is a collective operation, and a process that answered fewer would leave the others
    waiting in it."""
    batches = list(sampler.batches(0))
    if stop is None:
        yield from batches
        return
    rounds = len(batches)
    if accelerator.num_processes > 1:
        rounds = int(accelerator.gather(torch.tensor([rounds], device=accelerator.device)).max())
    for index in range(rounds):
        (stopped,) = main_process_decides(accelerator, stop())
        if stopped:
            raise EvaluationStopped
        if index < len(batches):
            yield batches[index]


def evaluation_batch_tokens(args, device: torch.device) -> int:
    """The token budget of a translation evaluation's batches: --eval_max_tokens, else --max_tokens, but on a CPU at
    most `default_batch_tokens` of PyTorch's threads (512 per thread): beam search there runs faster in small
    batches, with the same translations (benchmarks/README.md, "Decoding batches on a CPU")."""
    if args.eval_max_tokens:
        return args.eval_max_tokens
    if device.type != "cpu":
        return args.max_tokens
    return min(args.max_tokens, default_batch_tokens("cpu", torch.get_num_threads()))


@torch.no_grad()
def run_evaluation(args, accelerator, model, dataset, raw_split, tokenizer, collator, *, max_samples=None, stop=None):
    """Validation loss (label-smoothed, per target token) and perplexity; BLEU and chrF of beam-search translations
    against the raw references. Work is split across processes and gathered by example index. `stop`: see
    `held_out_batches`."""
    from accelerate.utils import gather_object

    unwrapped = accelerator.unwrap_model(model)
    indices = list(range(len(dataset) if max_samples is None else min(max_samples, len(dataset))))
    subset = dataset.select(indices)
    budget = evaluation_batch_tokens(args, accelerator.device)
    sampler = TokenBatchSampler(
        subset["source_length"], subset["target_length"], budget, shuffle=False,
        num_replicas=accelerator.num_processes, rank=accelerator.process_index, even_batches=False,
        oversized_alone=True,  # held-out pairs are never filtered: one longer than the budget is scored on its own
    )  # fmt: skip
    loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    nll_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    tokens = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    predictions = []
    with evaluation_mode(unwrapped):
        for batch_indices in held_out_batches(sampler, accelerator, stop):
            batch = collate(subset, batch_indices, collator, accelerator.device)
            with accelerator.autocast():
                out = unwrapped(**batch)
            mask = batch["labels"] != -100
            count = mask.sum()
            loss_sum += out.loss.double() * count
            nll_sum += torch.nn.functional.cross_entropy(
                out.logits.float()[mask], batch["labels"][mask], reduction="sum"
            ).double()
            tokens += count
            with accelerator.autocast():
                generated = unwrapped.generate(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    **beam_options(args.num_beams, args.length_penalty),
                )  # fmt: skip
            texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
            predictions.extend(zip((indices[i] for i in batch_indices), texts, strict=True))
    totals = accelerator.reduce(torch.stack([loss_sum, nll_sum, tokens]), reduction="sum")
    results = {"loss": (totals[0] / totals[2]).item(), "nll": (totals[1] / totals[2]).item()}
    results["ppl"] = math.exp(min(results["nll"], 50.0))
    gathered = sorted(gather_object(predictions))
    hypotheses = [text for _, text in gathered]
    references = [raw_split[i]["translation"][args.target_lang] for i, _ in gathered]
    if accelerator.is_main_process:
        results.update(corpus_scores(hypotheses, references, args.target_lang))
    results["examples"] = [
        {"source": raw_split[i]["translation"][args.source_lang], "reference": ref, "translation": hyp}
        for (i, hyp), ref in zip(gathered[: args.num_examples], references, strict=False)
    ]
    return results


def log_evaluation(split: str, results: dict, step: int) -> None:
    scores = ", ".join(
        f"{k} {results[k]:.2f}"
        for k in ("bleu", "chrf", "loss", "ppl", "perplexity", "accuracy")
        if isinstance(results.get(k), float)
    )
    logger.info("%s @ step %d: %s", split, step, scores)
    for example in results.get("examples", []):
        logger.info("  source:      %s", example["source"])
        logger.info("  reference:   %s", example["reference"])
        logger.info("  translation: %s", example["translation"])


@torch.no_grad()
def evaluate_language_model(
    model,
    dataset: datasets.Dataset,
    collate: Callable[[list[int]], dict],
    accelerator,
    *,
    targets: Callable,
    max_tokens: int,
    max_samples: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> dict:
    """loss (mean cross-entropy per scored token, the whole split token-weighted), perplexity = exp(loss) and
    accuracy (the share of scored tokens whose argmax is right) of `model` on (the first `max_samples` examples of)
    `dataset`, split across processes. `collate(indices)` makes a batch; `targets` aligns logits and labels; `stop`:
    see `held_out_batches`."""
    count = len(dataset) if max_samples is None else min(max_samples, len(dataset))
    lengths = dataset.select(range(count))["length"]
    sampler = TokenBatchSampler(
        lengths, lengths, max_tokens, shuffle=False, num_replicas=accelerator.num_processes,
        rank=accelerator.process_index, even_batches=False, oversized_alone=True,
    )  # fmt: skip
    totals = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # loss sum, right guesses, tokens
    with evaluation_mode(model):
        for indices in held_out_batches(sampler, accelerator, stop):
            batch = collate(indices)
            with accelerator.autocast():
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            logits, labels = targets(logits.float(), batch["labels"])  # (B, T', V), (B, T')
            scored = labels != -100  # (B, T')
            totals[0] += torch.nn.functional.cross_entropy(logits[scored], labels[scored], reduction="sum").double()
            totals[1] += (logits[scored].argmax(-1) == labels[scored]).sum()
            totals[2] += scored.sum()
    totals = accelerator.reduce(totals, reduction="sum")
    loss = (totals[0] / totals[2].clamp(min=1)).item()
    return {"loss": loss, "perplexity": float(torch.tensor(min(loss, 50.0)).exp()),
            "accuracy": (totals[1] / totals[2].clamp(min=1)).item(), "tokens": int(totals[2].item())}  # fmt: skip
