"""The training run in three steps: `set_up` (options to a ready model), `train_loop`, `finish`.

    vaswani train --config configs/demo.yaml                         # one process
    python train.py --config configs/demo.yaml                       # the same: train.py is the script form
    accelerate launch train.py --train_file data/train --validation_file data/valid \\
        --source_lang en --target_lang de --model_preset base --max_tokens 25000 --max_train_steps 100000

- `set_up`: the options (`options.py`), the run folder (`run_dir.py`), the Accelerator (`distributed.py`), the task's
  data and tokenizer (`tasks.py`), the model, token-budget batches (`vaswani.data.batching`), Adam + the Noam schedule
  (`schedules.py`), the weights' moving average (`ema.py`), LayerDrop/DropHead, the stopping rules (`stopping.py`)
  and an exact resume (`checkpoints.py`).
- `train_loop`: gradient accumulation through `accelerator.accumulate`, the loss normalised per target token, the
  share of the budget spent (for the schedules that know it, and the moving average), evaluation (`evaluation.py`)
  and checkpoints on schedule, until a stopping rule ends the run.
- `finish`: the final model chosen among the last, the best and the averaged checkpoints and the weights' moving
  average, test scores, the `save_pretrained` folder with tokenizer and model card, the upload.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import signal
import sys
import time
from pathlib import Path

import torch

from modeling_vaswani import (
    DropHeadScheduler,
    VaswaniConfig,
)
from modeling_vaswani.configuration_vaswani import MODEL_OPTIONS, TRAINING_ONLY_OPTIONS
from vaswani.constants import (
    CHECKPOINTS_SUBDIR,
    METRICS_FILE,
    RESULTS_FILE,
)
from vaswani.data.batching import TokenBatchSampler, collate, padding_efficiency, pinned, to_device
from vaswani.data.prefetch import Inline, Prefetcher
from vaswani.data.prepared import apply_manifest, check_sources_unchanged, load_prepared, read_manifest
from vaswani.devices import (
    disable_cudnn_attention,
    limit_onednn_primitive_cache,
    resolve_tf32,
    training_attention,
)
from vaswani.errors import (
    EnvironmentFailure,
    Interrupted,
    ModelFolderError,
    PushError,
    UsageError,
    run_command,
)
from vaswani.hub.model_card import write_model_card
from vaswani.hub.push import push_model_folder
from vaswani.model_folder import (
    check_model_folder,
    check_tokenizer_fits,
    load_config,
    load_model_folder,
    recover_model_folder,
    write_model_folder,
)
from vaswani.training.checkpoints import (
    CheckpointManager,
    TrainingProgress,
    TrainingState,
    load_checkpoint,
    save_checkpoint,
)
from vaswani.training.distributed import (
    create_accelerator,
    from_main_process,
    main_process_decides,
    main_process_value,
    together,
)
from vaswani.training.ema import WeightEMA
from vaswani.training.evaluation import EvaluationStopped, log_evaluation
from vaswani.training.options import parse_args, unknown_length
from vaswani.training.run_dir import (
    MetricsLog,
    prepare_output_dir,
    setup_logging,
    start_new_run,
    truncate_metrics,
    write_run_config,
)
from vaswani.training.schedules import BudgetSchedule, build_lr_scheduler
from vaswani.training.speed import (
    ComputeWeights,
    Recompilations,
    apply_step_speed,
    check_step_speed,
    resolve_step_speed,
)
from vaswani.training.stopping import (
    TIME_BUDGET_SPENT,
    AveragingWindow,
    Candidate,
    StoppingRules,
    StopSignals,
    choose,
)
from vaswani.training.tasks import TASKS, Run, get_tokenizer
from vaswani.weights import average_into_model

logger = logging.getLogger("train")


def resolve_model_config(args) -> VaswaniConfig:
    """The model's configuration, validated before any data is read or any file written: a saved model's config with
    the command line's overrides, or a preset with them. (The vocabulary size and special-token ids of a new model
    come from the tokenizer later; until then `--vocab_size` stands in.)"""
    overrides = {name: getattr(args, name) for name in MODEL_OPTIONS if getattr(args, name) is not None}
    try:
        if args.model:  # a local folder; config.json checked (ModelFolderError names the problem)
            check_model_folder(args.model, need_tokenizer=False)
            config = load_config(args.model)
            check_trained_architecture(args.model, config, overrides)
            config.update(overrides)  # what is left to change: options that act only in training
        else:
            config = VaswaniConfig.from_preset(args.model_preset, vocab_size=args.vocab_size, **overrides)
        config.validate()
    except ModelFolderError as exc:
        raise UsageError(f"--model: {exc}") from exc
    except ValueError as exc:  # config validation: a wrong option value
        raise UsageError(str(exc)) from exc
    return config


def check_trained_architecture(model: str, saved: VaswaniConfig, overrides: dict) -> None:
    """A trained model (`--model`) keeps what its weights compute: an option outside `TRAINING_ONLY_OPTIONS` given
    with another value than its config.json's (e.g. a --config written for a new model) is a `UsageError` naming
    each, where loading would have blamed the folder's weights."""
    changed = {name: value for name, value in overrides.items()
               if name not in TRAINING_ONLY_OPTIONS and value != getattr(saved, name, None)}  # fmt: skip
    if changed:
        given = ", ".join(f"--{name} {value}" for name, value in changed.items())
        trained = ", ".join(f"{name} {getattr(saved, name, None)}" for name in changed)
        raise UsageError(
            f"--model {model} was trained with {trained}; {given} (on the command line or in --config) would not "
            f"fit its weights: drop them (a trained model may change only {', '.join(TRAINING_ONLY_OPTIONS)})"
        )


def build_model(args, config, tokenizer, attn_implementation: str | None = None) -> torch.nn.Module:
    """The task's model (`Task.model_class`): loaded from --model, or new with the tokenizer's
    vocabulary size and special-token ids; with the attention kernel `attn_implementation` (`training_attention`'s
    choice; None: the model's default)."""
    if args.model:  # weights checked against the config (with the command line's overrides)
        model, _ = load_model_folder(args.model, need_tokenizer=False, config=config)
    else:
        config.vocab_size = len(tokenizer)
        config.pad_token_id, config.bos_token_id = tokenizer.pad_token_id, tokenizer.bos_token_id
        config.eos_token_id = tokenizer.eos_token_id
        if config.is_encoder_decoder:  # the decoder starts from BOS; a one-stack config has no such id
            config.decoder_start_token_id = tokenizer.bos_token_id
        try:
            config.validate()
        except ValueError as exc:
            raise UsageError(f"the tokenizer does not fit the model configuration: {exc}") from exc
        model = TASKS[args.task].model_class(config)
    check_tokenizer_fits(tokenizer, model.config, where=f"--tokenizer {args.tokenizer or 'of this run'}", exact=True)
    if attn_implementation is not None:
        try:  # transformers checks that the kernel exists here (flash-attn installed, a CUDA device)
            model.set_attn_implementation(attn_implementation)
        except (ImportError, ValueError) as exc:
            raise UsageError(f"--attn_implementation {attn_implementation} cannot be used here: {exc}") from None
    if args.gradient_checkpointing:
        # transformers renamed it; the old name warns that it goes away in v6 (the new one is not in every 5.x)
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    return model


def build_optimizer(args, model, device_type: str) -> torch.optim.Optimizer:
    """Adam(0.9, 0.98, 1e-9) as in Section 5.3; with --weight_decay, AdamW decaying matrices only (p.dim() >= 2)."""
    betas = (args.adam_beta1, args.adam_beta2)
    params = [p for p in model.parameters() if p.requires_grad]
    # The fused kernel updates all tensors in one pass (CPU and CUDA); the per-tensor loop dominates small models.
    fused = {"fused": True} if device_type in ("cpu", "cuda") else {}
    if args.weight_decay == 0:
        return torch.optim.Adam(params, lr=1.0, betas=betas, eps=args.adam_epsilon, **fused)
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1.0, betas=betas, eps=args.adam_epsilon, **fused)


def main(argv: list[str] | None = None, prog: str | None = None) -> dict:
    """One training run from a command line (`train.py`); see `train`."""
    return train(parse_args(argv, prog))


def train(args: argparse.Namespace) -> dict:
    """One training run, from checked options (`vaswani.training.options.finish_args`) to the saved model; returns its
    results (what results.json holds), or `{"step": N, "stopped_early": True}` when --stop_after_steps /
    --stop_after_minutes ended this invocation."""
    run = set_up(args)
    try:
        ended = train_loop(run)
        compiled = "" if run.recompilations is None else f"; graphs compiled: {run.recompilations.count()}"
        logger.info("Batch shapes trained on: %d%s", len(run.shapes_met), compiled)
        if ended == STOPPED:
            return {"step": run.training.progress.step, "stopped_early": True}
        return finish(run, finished_early=ended)
    finally:
        close(run)  # also after an error, so that the process group is torn down as `close` explains


def set_up(args: argparse.Namespace) -> Run:
    """Options -> Accelerator, output folder, data, tokenizer, model, optimizer and schedules, restored from a
    checkpoint when resuming. Every check a user can fail happens here, before anything is replaced."""
    task = TASKS[args.task]
    manifest = None
    if args.prepared_data:  # its options, checked against the command line's, before any work
        manifest = read_manifest(args.prepared_data)
        apply_manifest(args, manifest)
        task.check_lengths(args)
    accelerator, ddp_kwargs, precision_reason = create_accelerator(args)
    try:
        return build_run(args, task, manifest, accelerator, ddp_kwargs, precision_reason)
    except BaseException:
        # the process group torn down from Python's side, as `close` does after training, not by the interpreter's
        # exit: a run that stops here (a user error on one process, `together` stopping the others) exits cleanly
        accelerator.end_training()
        raise


def build_run(args: argparse.Namespace, task, manifest: dict | None, accelerator, ddp_kwargs,
              precision_reason: str) -> Run:  # fmt: skip
    """`set_up`'s work once the Accelerator (and the process group) exists."""
    from accelerate.utils import set_seed

    setup_logging(accelerator)
    logger.info("Mixed precision: %s (%s)", accelerator.mixed_precision, precision_reason)
    try:
        tf32 = resolve_tf32(args.tf32, accelerator.device.type)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if tf32 is not None:
        logger.info("TF32: %s", tf32)
    if (attention := disable_cudnn_attention(accelerator.device.type)) is not None:
        logger.info("Attention kernels: %s", attention)
    if (cache := limit_onednn_primitive_cache(accelerator.device.type)) is not None:
        logger.info("oneDNN primitive cache: %s", cache)
    # the step options' mistakes (no C++ compiler for --torch_compile, options that exclude each other) before any
    # data is read or tokenizer trained; `speed_up_step` resolves them for good once the vocabulary is known
    check_step_speed(args, accelerator.device.type, accelerator.mixed_precision, accelerator.num_processes)
    with together(accelerator):
        if accelerator.is_main_process:
            recover_model_folder(args.output_dir)  # finish (or undo) a final save that a kill interrupted
    output_dir, resume_checkpoint = prepare_output_dir(args)
    set_seed(args.seed)  # identical initial weights on every process

    config = task.model_config(resolve_model_config(args))
    if manifest is not None:  # the held-out text only (references); the tokens come in task.tokenize
        _, raw, summary = load_prepared(args.prepared_data, manifest)
        summary = "\n".join([summary, *check_sources_unchanged(manifest)])
    else:
        raw, summary = task.load_data(args, accelerator)
    logger.info("Data:\n%s", summary)
    tokenizer = get_tokenizer(args, raw, output_dir, accelerator, config)
    attention, why = training_attention(args.attn_implementation, accelerator.device.type, accelerator.mixed_precision)
    model = build_model(args, config, tokenizer, attention)
    logger.info("Attention kernel: %s (%s)", model.config._attn_implementation, why)
    speed, recompilations = speed_up_step(args, accelerator, model, len(tokenizer))
    if model.uses_layerdrop and accelerator.num_processes > 1:
        if args.gradient_checkpointing:
            raise UsageError("LayerDrop with gradient checkpointing fails under DDP; turn one of them off.")
        ddp_kwargs.find_unused_parameters = True  # skipped layers get no gradient (every rank skips the same ones)
    # main_process_first in tokenize_splits ended once every process had its tokenizer: the staged one may move now
    tokenized = task.tokenize(args, raw, tokenizer, accelerator)
    with together(accelerator):
        if accelerator.is_main_process:
            if resume_checkpoint is None:
                start_new_run(args, output_dir)  # every check has passed: only now is anything replaced
            write_run_config(output_dir, model)  # a checkpoint can become a model folder while the run trains

    sampler, max_steps = training_batches(args, accelerator, task, tokenized["train"], speed.shape_buckets)
    optimizer = build_optimizer(args, model, accelerator.device.type)
    lr_scheduler, drophead = build_schedules(args, model, optimizer, max_steps)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(prepared)
    ema = WeightEMA(unwrapped, args.ema_decay) if args.ema_decay is not None else None
    training = TrainingState(
        accelerator, unwrapped, optimizer, lr_scheduler, drophead, TrainingProgress(), max_steps, ema,
    )  # fmt: skip
    manager = CheckpointManager(
        output_dir / CHECKPOINTS_SUBDIR, keep_last=max(args.keep_checkpoints, args.average_checkpoints, 1)
    )
    with together(accelerator):
        if accelerator.is_main_process:
            manager.remove_incomplete()  # leftovers of a save that was killed
    window = AveragingWindow(
        count=args.average_checkpoints, fraction=args.average_window, max_steps=max_steps,
        budget_seconds=None if args.max_train_minutes is None else 60 * args.max_train_minutes,
    )  # fmt: skip
    rules = StoppingRules(
        output_dir, args.max_train_minutes, args.early_stopping_patience, args.metric_for_best,
        record=bool(args.eval_steps) and args.final_model in ("auto", "best"), window=window,
    )  # fmt: skip
    if resume_checkpoint is not None:
        resume(accelerator, manager, resume_checkpoint, training, rules, output_dir)
    accelerator.init_trackers(
        "vaswani", config={k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}
    )
    collator, eval_collator = task.collators(args, tokenizer, model)
    return Run(
        args=args, accelerator=accelerator, output_dir=output_dir, task=task, raw=raw, tokenized=tokenized,
        tokenizer=tokenizer, collator=collator, eval_collator=eval_collator, model=prepared,
        training=training, sampler=sampler, manager=manager, rules=rules,
        metrics=MetricsLog(accelerator, output_dir / METRICS_FILE), speed=speed,
        compute_weights=ComputeWeights(unwrapped, speed.bf16_weights), recompilations=recompilations,
    )  # fmt: skip


def speed_up_step(args, accelerator, model, vocab_size: int) -> tuple:
    """The step's speed options resolved (`vaswani.training.speed`) and applied to the model: the fused loss's chunk
    and, with --torch_compile, its layers compiled, with --compiled_loss its loss. Returns them and the compile
    counter (None without compiling)."""
    speed = resolve_step_speed(args, accelerator.device.type, accelerator.mixed_precision, accelerator.num_processes,
                               vocab_size)  # fmt: skip
    logger.info("Training step: %s", speed.describe())
    recompilations = Recompilations() if speed.torch_compile or speed.compiled_loss else None
    for compiled in apply_step_speed(model, speed):
        logger.info("Compiling %s", compiled)
    return speed, recompilations


def training_batches(
    args, accelerator, task, train, shape_buckets: int | None
) -> tuple[TokenBatchSampler, int | None]:
    """This process's token-budget batches of the training split (with `shape_buckets`, of at most that many
    shapes) and the run's number of updates (None: a time budget or early stopping ends it); both logged."""
    source_lengths, target_lengths = task.lengths(train)
    sampler = TokenBatchSampler(
        source_lengths, target_lengths, args.max_tokens, shuffle=True, seed=args.seed,
        num_replicas=accelerator.num_processes, rank=accelerator.process_index, max_sentences=args.max_sentences,
        shape_buckets=shape_buckets,
    )  # fmt: skip
    updates_per_epoch = max(len(sampler) // args.gradient_accumulation_steps, 1)
    max_steps = None if unknown_length(args) else (
        args.max_train_steps or math.ceil(args.num_train_epochs * updates_per_epoch))  # fmt: skip
    logger.info(
        "Training %d %s in %d batches/epoch/process (padding efficiency %.1f%%), %s, %d processes",
        len(train), task.examples, len(sampler),
        100 * padding_efficiency(sampler.batches(0), source_lengths, target_lengths, sampler.batch_shape),
        f"{max_steps} updates" if max_steps else "until " + ending_rule(args), accelerator.num_processes,
    )  # fmt: skip
    if sampler.shapes is not None:
        logger.info("Shape buckets: %d batch shapes (rows x source x target): %s", len(sampler.shapes),
                    ", ".join("x".join(map(str, shape)) for shape in sampler.shapes.tolist()))  # fmt: skip
    return sampler, max_steps


def ending_rule(args: argparse.Namespace) -> str:
    """What ends a run of unknown length, in words."""
    rules = [f"{args.max_train_minutes:g} minutes are spent"] if args.max_train_minutes is not None else []
    if args.early_stopping_patience is not None:
        rules.append(f"{args.early_stopping_patience} evaluations bring no better {args.metric_for_best}")
    return " or ".join(rules)


def build_schedules(args, model, optimizer, max_steps: int | None) -> tuple[object, DropHeadScheduler | None]:
    """The learning-rate schedule (Section 5.3's Eq. 3 by default) and the scheduled DropHead rate, if any."""
    try:
        lr_scheduler = build_lr_scheduler(
            args.lr_scheduler, optimizer, warmup_steps=args.warmup_steps, total_steps=max_steps,
            d_model=model.config.d_model, learning_rate=args.learning_rate, factor=args.lr_factor,
            budget_minutes=args.max_train_minutes, decay_fraction=args.decay_fraction, decay_type=args.decay_type,
            min_lr_ratio=args.min_lr_ratio,
        )  # fmt: skip
        if args.drophead_p_start is None:
            return lr_scheduler, None
        kinds = args.drophead_kinds
        if "drophead_kinds" not in getattr(args, "explicit", ()):  # the default: every kind of attention the model has
            kinds = [kind for kind in kinds if kind in model.drophead_kinds]  # (a one-stack model has one)
        drophead = DropHeadScheduler(
            model, args.drophead_p_start, args.drophead_p_end, args.warmup_steps, max_steps, kinds=kinds
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return lr_scheduler, drophead


def resume(accelerator, manager, checkpoint: Path, training: TrainingState, rules: StoppingRules, output_dir) -> None:
    """Continue the run from `checkpoint`: later checkpoints set aside (a resume from an older one starts a new
    branch), weights and training state loaded, metrics.jsonl cut back to the checkpoint's step, the time budget and
    early-stopping counts restored."""
    with together(accelerator):
        if accelerator.is_main_process:
            for moved in manager.set_aside_newer(checkpoint):
                logger.warning("Resuming from an older checkpoint: moved the later %s aside to %s", moved.name, moved)
    with together(accelerator):
        load_checkpoint(accelerator, checkpoint, training)
    progress = training.progress
    with together(accelerator):
        if accelerator.is_main_process:
            dropped = truncate_metrics(output_dir / METRICS_FILE, progress.step)
            if dropped:
                logger.info("Dropped %d metrics.jsonl rows logged after step %d (the checkpoint)", dropped,
                            progress.step)  # fmt: skip
            logger.info("Time budget and early stopping: %s", rules.restore(checkpoint))
    logger.info(
        "Resumed from %s at step %d (epoch %d, batch %d)", checkpoint, progress.step, progress.epoch,
        progress.batch_in_epoch,
    )  # fmt: skip


STOPPED = "stopped"  # train_loop's answer when --stop_after_steps/--stop_after_minutes ended this invocation


def train_loop(run: Run) -> str | None:
    """Updates until max_steps (Section 5), with logging, evaluations and checkpoints on the way. Returns None when
    max_steps was reached, why the run finishes early (time budget spent, early stopping), or STOPPED when this
    invocation ends and a later one resumes; raises `Interrupted` after the checkpoint of the update during which
    Ctrl-C or SIGTERM came (`StopSignals`). The batches of the next --prefetch_updates updates are made in a
    background thread meanwhile (`vaswani.data.prefetch`), unless the task's collator draws random numbers."""
    args = run.args
    make_group = functools.partial(next_group, run, batch_stream(run.sampler, run.training.progress))
    if args.prefetch_updates and not run.task.random_collator:
        feeder = Prefetcher(make_group, depth=args.prefetch_updates)
    else:
        feeder = Inline(make_group)
    try:
        quiet = not run.accelerator.is_main_process  # one process says it (every process gets Ctrl-C)
        with StopSignals(on_first=(lambda signum: None) if quiet else announce_stop) as signals:
            return _train_loop(run, feeder, signals)
    finally:
        feeder.close()


def signal_name(signum: int) -> str:
    """How the log names a stopping signal: Ctrl-C for SIGINT, else its name (SIGTERM)."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def announce_stop(signum: int) -> None:
    """What the first Ctrl-C or SIGTERM of a training loop says (`StopSignals`)."""
    logger.warning("%s: stopping at the end of this update with a checkpoint (an evaluation under way stops after its "
                   "batch and runs again on resume; Ctrl-C%s stops at once, without one)", signal_name(signum),
                   " again" if signum == signal.SIGINT else "")  # fmt: skip


def _train_loop(run: Run, feeder: Prefetcher | Inline, signals: StopSignals) -> str | None:
    args, accelerator, training = run.args, run.accelerator, run.training
    progress, max_steps = training.progress, training.max_steps
    bar = ProgressBar(max_steps, run.rules.budget, progress.step, disable=not accelerator.is_local_main_process)
    window = LossWindow(accelerator, feeder)
    last_save, invocation_start, start_step = time.monotonic(), time.monotonic(), progress.step
    loop_seconds = 0.0
    # resumed from a checkpoint whose evaluation a signal stopped (the main process read it): the first round of the
    # loop makes no update, it runs that evaluation
    (evaluation_due,) = main_process_decides(accelerator, run.rules.evaluation_due)
    (budget_spent,) = main_process_decides(accelerator, run.rules.budget_spent(loop_seconds))
    if budget_spent and not evaluation_due:  # resumed from the checkpoint the budget ended at (a kill came during
        bar.close()  # the final steps)
        return TIME_BUDGET_SPENT
    run.model.train()
    while max_steps is None or progress.step < max_steps:
        if not evaluation_due:  # an update (the round that runs a resumed evaluation makes none)
            window.add(*train_step(run, feeder))
            reach_budget_fraction(run, time.monotonic() - invocation_start)
            if args.logging_steps and progress.step % args.logging_steps == 0:
                values = {**window.flush(), "lr": training.lr_scheduler.get_last_lr()[0], "epoch": progress.epoch,
                          "batch_shapes": len(run.shapes_met)}  # fmt: skip
                if run.recompilations is not None:
                    values["compiled_graphs"] = run.recompilations.count()
                bar.show(loss=f"{values['loss']:.3f}", lr=f"{values['lr']:.2e}")
                run.metrics("train", progress.step, values)
        resumed_evaluation = evaluation_due  # its checkpoint is saved again, no longer saying it is due
        evaluated = evaluation_due or (
            bool(args.eval_steps) and progress.step % args.eval_steps == 0 and progress.step != max_steps
        )
        evaluation_due = early_stop = False
        if evaluated:
            try:
                results = run.evaluate("validation", max_samples=args.max_eval_samples,
                                       stop=lambda: signals.received is not None)  # fmt: skip
            except EvaluationStopped:  # saved below at once, with the evaluation due again on resume
                evaluated, evaluation_due = False, True
                if accelerator.is_main_process:
                    logger.warning("Stopped the evaluation at update %d; it runs again when the run resumes",
                                   progress.step)  # fmt: skip
            else:
                run.metrics("validation", progress.step, {k: v for k, v in results.items() if k != "examples"})
                log_evaluation("validation", results, progress.step)
                bar.show(**{args.metric_for_best: f"{results[args.metric_for_best]:.2f}"}
                         if accelerator.is_main_process else {})  # fmt: skip
                early_stop = accelerator.is_main_process and run.rules.evaluated(progress.step, results)
        run.rules.evaluation_due = evaluation_due  # written into the checkpoint saved below

        loop_seconds_before, loop_seconds = loop_seconds, time.monotonic() - invocation_start
        bar.advance(progress.step, loop_seconds)
        stop = (args.stop_after_steps and progress.step - start_step >= args.stop_after_steps) or (
            args.stop_after_minutes and loop_seconds >= 60 * args.stop_after_minutes
        )
        stop, interrupted, due_by_time, budget_spent, early_stop, due_in_window = main_process_decides(
            accelerator, bool(stop), signals.received is not None,
            time.monotonic() - last_save >= 60 * args.checkpoint_minutes, run.rules.budget_spent(loop_seconds),
            early_stop, run.rules.save_due(progress.step, loop_seconds_before, loop_seconds),
        )  # fmt: skip
        due_by_steps = args.checkpoint_steps and progress.step % args.checkpoint_steps == 0
        due_by_rules = budget_spent or early_stop or due_in_window or (evaluated and run.rules.stopper is not None)
        if (progress.step == max_steps or due_by_steps or due_by_time or stop or interrupted or due_by_rules
                or resumed_evaluation):  # fmt: skip
            path = save_checkpoint(accelerator, run.manager, run.model, training,
                                   functools.partial(run.rules.write_state, loop_seconds=loop_seconds))  # fmt: skip
            last_save = time.monotonic()
            with together(accelerator):
                if accelerator.is_main_process:
                    run.rules.saved(path, progress.step)
        if interrupted:  # Ctrl-C or SIGTERM on the main process: every process stops here, its checkpoint saved
            bar.close()
            signum = signals.received or signal.SIGTERM
            if accelerator.is_main_process:
                logger.warning("Stopped by %s at update %d%s, saved in %s; continue with --resume_from_checkpoint "
                               "latest", signal_name(signum), progress.step, f" of {max_steps}" if max_steps else "",
                               path)  # fmt: skip
            raise Interrupted(signum)
        if progress.step == max_steps:
            break
        if budget_spent or early_stop:
            why = TIME_BUDGET_SPENT if budget_spent else f"early stopping ({run.rules.stopper.metric})"
            logger.info("Finishing at update %d%s: %s (learning rate %.3g)", progress.step,
                        f" of {max_steps}" if max_steps else "", why,
                        training.lr_scheduler.get_last_lr()[0])  # fmt: skip
            bar.close()
            return why
        if stop:
            bar.close()
            logger.info("Stopped at update %d%s; continue with --resume_from_checkpoint latest", progress.step,
                        f" of {max_steps}" if max_steps else "")  # fmt: skip
            return STOPPED
    bar.close()
    return None


def reach_budget_fraction(run: Run, loop_seconds: float) -> None:
    """After every update: the fraction of the budget spent (`run_fraction`), decided on the main process and sent to
    the others so that every process uses the same learning rate and average, moves a budget schedule and the
    weights' moving average (`TrainingState.reach`). The start of warmup_stable_decay's decay is logged."""
    training, accelerator = run.training, run.accelerator
    if not training.follows_budget:
        training.reach(0.0)  # a moving average with a fixed decay: the fraction plays no part
        return
    fraction, _ = run_fraction(training.progress.step, training.max_steps, run.rules.budget, loop_seconds)
    if run.rules.budget.seconds is not None:  # time-based: each process's clock differs; the main process's counts
        fraction = main_process_value(accelerator, fraction)
    schedule = training.lr_scheduler
    decaying = isinstance(schedule, BudgetSchedule) and schedule.in_decay()
    training.reach(fraction)
    if isinstance(schedule, BudgetSchedule) and schedule.in_decay() and not decaying:
        logger.info("Learning rate decay (%s, the last %g%% of the budget) starts at update %d, %.0f%% of the budget "
                    "spent: %.3g, down to %.3g", schedule.decay_type, 100 * schedule.decay_fraction,
                    training.progress.step, 100 * fraction, schedule.get_last_lr()[0],
                    schedule.base_lrs[0] * schedule.min_lr_ratio)  # fmt: skip


class ProgressBar:
    """The training bar, filled towards the limit that will end the run: the updates of --max_train_steps or the
    minutes of --max_train_minutes, whichever is further along (at steady rates, the one that ends the run first).
    The update count, the latest loss and learning rate and the latest validation score ride along."""

    def __init__(self, max_steps: int | None, budget, step: int, disable: bool):
        from tqdm.auto import tqdm

        self.max_steps, self.budget = max_steps, budget
        self.bar = tqdm(
            total=100, disable=disable, desc="Training", bar_format="{desc}{percentage:3.0f}%|{bar}| "
            "[{elapsed}<{remaining}{postfix}]",
            mininterval=0.1 if sys.stderr.isatty() else 30,  # a log file gets a line every 30 s, a terminal a live bar
        )  # fmt: skip
        self.values = {}
        self.advance(step, 0.0)

    def advance(self, step: int, loop_seconds: float) -> None:
        fraction, limit = run_fraction(step, self.max_steps, self.budget, loop_seconds)
        self.bar.set_description(f"Training ({limit})", refresh=False)
        self.bar.update(100 * fraction - self.bar.n)

    def show(self, **values: str) -> None:
        self.values.update(values)
        self.bar.set_postfix(self.values, refresh=False)

    def close(self) -> None:
        self.bar.close()


def run_fraction(step: int, max_steps: int | None, budget, loop_seconds: float) -> tuple[float, str]:
    """How far the run is towards the limit that will end it (0 to 1; 0 when only early stopping can end it), and
    the progress in that limit's unit, e.g. "530/1000 updates" or "12.1/20 min, update 530"."""
    by_steps = step / max_steps if max_steps else 0.0
    spent = budget.seconds_before + loop_seconds
    by_time = spent / budget.seconds if budget.seconds else 0.0
    if by_time > by_steps:
        return min(by_time, 1.0), f"{spent / 60:.1f}/{budget.minutes:g} min, update {step}"
    return by_steps, f"{step}/{max_steps} updates" if max_steps else f"update {step}"


def next_group(run: Run, stream) -> tuple[list, list[dict]]:
    """The next update's --gradient_accumulation_steps batches: their (epoch, index_in_epoch, indices) from `stream`
    and the collated batches, on the host (made ahead by `train_loop`'s feeder); for a GPU in pinned memory, which
    `train_step` copies from without blocking (pinning takes about a millisecond a tensor: done here, in the feeder's
    thread, it is off the thread that launches the GPU's work)."""
    group = [next(stream) for _ in range(run.args.gradient_accumulation_steps)]
    batches = [collate(run.tokenized["train"], indices, run.collator, shape=run.sampler.batch_shape(indices))
               for *_, indices in group]  # fmt: skip
    if run.accelerator.device.type == "cuda":
        batches = [pinned(batch) for batch in batches]
    return group, batches


def train_step(run: Run, feeder: Prefetcher | Inline) -> tuple[torch.Tensor, int]:
    """One optimizer update over --gradient_accumulation_steps micro-batches; returns the update's summed token loss
    (this process) and its target tokens (this process)."""
    args, accelerator, training, model = run.args, run.accelerator, run.training, run.model
    progress, optimizer = training.progress, training.optimizer
    step_start = time.perf_counter()
    group, host_batches = feeder.next()
    # Normalise by the real target tokens of the whole update (all micro-batches, all processes): each micro-batch
    # contributes its token sum / N. DDP averages over processes and `accelerator.backward` divides by the
    # accumulation steps, so the divisor handed to the model is N / (processes * accumulation steps). The tokens are
    # counted on the host, before the copies: a GPU is never waited for here.
    local_tokens = sum(run.task.scored_tokens(b) for b in host_batches)
    micro_batches = [to_device(batch, accelerator.device) for batch in host_batches]
    if accelerator.num_processes == 1:  # no reduction: no wait for the device before the forward pass
        global_tokens = local_tokens
    else:
        global_tokens = accelerator.reduce(torch.tensor(local_tokens, device=accelerator.device), "sum").item()
    divisor = global_tokens / (accelerator.num_processes * args.gradient_accumulation_steps)
    loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    run.shapes_met.update((*batch["input_ids"].shape, batch["labels"].shape[1]) for batch in host_batches)
    run.compute_weights.hold()  # --bf16_weights: bfloat16 copies for the passes (else nothing happens)
    for batch in micro_batches:
        with accelerator.accumulate(model):
            loss = model(**batch, num_items_in_batch=divisor).loss
            accelerator.backward(loss)
            run.compute_weights.collect()
            loss_sum += loss.detach().double() * divisor  # this micro-batch's token-loss sum
            if accelerator.sync_gradients:
                run.compute_weights.release()  # the float32 weights and gradients for the update
                if args.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
    if not accelerator.optimizer_step_was_skipped:
        training.lr_scheduler.step()
    if training.drophead is not None:
        training.drophead.step()
    progress.step += 1
    progress.epoch, progress.batch_in_epoch = group[-1][0], group[-1][1] + 1
    progress.target_tokens += global_tokens
    progress.train_seconds += time.perf_counter() - step_start
    return loss_sum, local_tokens


class LossWindow:
    """Training loss per target token and tokens/s since the last log line, summed over processes, and the share of
    that time this process waited for its batches (`feeder`: the time `next` waited)."""

    def __init__(self, accelerator, feeder: Prefetcher | Inline):
        self.accelerator, self.feeder = accelerator, feeder
        self.loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        self.tokens = torch.zeros((), dtype=torch.float64, device=accelerator.device)
        self.start, self.waited = time.perf_counter(), feeder.wait_seconds

    def add(self, loss_sum: torch.Tensor, tokens: int) -> None:
        self.loss += loss_sum
        self.tokens += tokens

    def flush(self) -> dict:
        """Every process calls this (a reduction); the window starts again."""
        totals = self.accelerator.reduce(torch.stack([self.loss, self.tokens]), "sum")
        seconds = time.perf_counter() - self.start
        values = {
            "loss": (totals[0] / totals[1]).item(),
            "target_tokens_per_second": totals[1].item() / seconds,
            "data_wait_share": (self.feeder.wait_seconds - self.waited) / seconds,
        }
        self.loss.zero_()
        self.tokens.zero_()
        self.start, self.waited = time.perf_counter(), self.feeder.wait_seconds
        return values


def finish(run: Run, finished_early: str | None) -> dict:
    """The final model (`choose_final_model`), validation and test scores, the model folder written atomically with
    its tokenizer, results and card, and the optional upload to the Hub. Returns the results."""
    args, accelerator, progress = run.args, run.accelerator, run.training.progress
    unwrapped = run.training.model
    accelerator.wait_for_everyone()
    chosen, choice, scored = choose_final_model(run, finished_early)
    final = {"step": progress.step, "averaged_checkpoints": [p.name for p in chosen.checkpoints],
             "final_model": choice, "target_tokens": progress.target_tokens,
             "train_seconds": progress.train_seconds}  # fmt: skip
    if finished_early:
        final["finished_early"] = finished_early
    if args.early_stopping_patience is not None:
        final["early_stopping"] = run.rules.stopper.state_dict()
    for split, limit in (("validation", args.final_eval_samples), ("test", args.max_test_samples)):
        if split in run.tokenized:
            results = scored.get(split) or run.evaluate(split, max_samples=limit)
            if limit is not None and limit < len(run.tokenized[split]):
                results["split"] = f"{split}[:{limit}]"  # scored on the first `limit` examples (datasets' notation)
            scores = {k: v for k, v in results.items() if k not in ("examples", "split")}
            run.metrics(f"final_{split}", progress.step, {**scores, "dataset_split": results.get("split", split)})
            log_evaluation(f"final {results.get('split', split)}", results, progress.step)
            final[split] = results
    with together(accelerator):
        if accelerator.is_main_process:

            def write(folder: Path) -> None:
                unwrapped.save_pretrained(folder)
                run.tokenizer.save_pretrained(folder)
                (folder / RESULTS_FILE).write_text(json.dumps(final, indent=2, ensure_ascii=False))
                # named after the output folder, not the staging folder it is written in
                write_model_card(
                    folder,
                    args=vars(args),
                    results=final,
                    config=unwrapped.config,
                    repo_id=args.hub_model_id or run.output_dir.resolve().name,
                )

            # a kill leaves the previous content or the complete new model; checkpoints/, metrics.jsonl etc. are kept
            write_model_folder(run.output_dir, write, replace=True)
            logger.info("Saved the final model to %s", run.output_dir)
            logger.info(run.task.usage(run.output_dir))
    if args.push_to_hub and accelerator.is_main_process:
        final.update(push(run.output_dir, args.hub_model_id))
    return final


def close(run: Run) -> None:
    """End the trackers and the process group. The DDP-wrapped model is released first: destroying the gloo process
    group from the DDP reducer's destructor joins gloo's worker threads while holding the GIL, and a worker that is
    still releasing a just-finished collective needs the GIL: the process hangs at exit, now and then (seen in CI).
    Destroyed from Python's side last, the group is torn down with the GIL released (pytorch/pytorch#56297)."""
    run.model = None
    run.accelerator.free_memory()  # the accelerator's own references to the prepared model and optimizer
    run.accelerator.end_training()


def choose_final_model(run: Run, finished_early: str | None) -> tuple[Candidate, dict, dict]:
    """The model the run hands over (vaswani/training/stopping.py): with --final_model auto, the best on the validation set of
    the last checkpoint, the best evaluated checkpoint, the average of the window (Section 6.1's averaging, scaled to
    the run) and the weights' moving average (--ema_decay), each on --final_eval_samples validation pairs (default:
    all); scores recorded during training are reused when they were on as many pairs, the others are computed here
    (after the time budget: the choice costs no update). Loads the winner's
    weights into the model; returns it, what results.json says of the choice, and the winner's validation results
    when they were computed here ({"validation": results}, else {}: the caller need not compute them again)."""
    args, accelerator, unwrapped = run.args, run.accelerator, run.training.model
    # The main process alone holds the validation record (and BLEU/chrF): it lists the candidates for every process.
    candidates = from_main_process(
        accelerator, lambda: run.rules.candidates(run.manager.checkpoints(), finished_early)
    )
    selection = args.final_model
    if selection == "auto" and "validation" not in run.tokenized:
        selection = "average"
        logger.warning("No validation set to choose the final model with: it is the window's average (the paper's)")
    validation, examples = {}, None
    if selection == "auto":
        # the scores recorded during training are on --max_eval_samples pairs (400 in the small-data recipe): close
        # candidates need more pairs to be told apart
        examples = validation_examples(run, args.final_eval_samples)
        rescore = examples != validation_examples(run, args.max_eval_samples)
        for candidate in candidates:
            if candidate.score is None or rescore:
                average_into_model(unwrapped, candidate.weights)
                validation[candidate.name] = run.evaluate("validation", max_samples=args.final_eval_samples)
                candidate.score = validation[candidate.name].get(args.metric_for_best)
        chosen = candidates.index(choose(candidates, args.metric_for_best)) if accelerator.is_main_process else 0
        chosen = candidates[from_main_process(accelerator, lambda: chosen)]
    else:  # forced; a candidate the run does not have (no evaluation, a window of one) falls back to the last
        chosen = next((c for c in candidates if c.name == selection), candidates[0])
    average_into_model(unwrapped, chosen.weights)
    if accelerator.is_main_process:
        among = "; ".join(f"{c.name} {c.score:.2f}" for c in candidates) if selection == "auto" else ""
        logger.info("Final model: %s (%s), %s", chosen.name, ", ".join(p.name for p in chosen.checkpoints),
                    f"chosen by validation {args.metric_for_best} ({examples} examples) among {among}" if among
                    else f"--final_model {selection}")  # fmt: skip
    choice = {"chosen": chosen.name, "selection": selection, "metric": args.metric_for_best,
              "validation_examples": examples, "candidates": [c.describe() for c in candidates]}  # fmt: skip
    return chosen, choice, {"validation": validation[chosen.name]} if chosen.name in validation else {}


def validation_examples(run: Run, max_samples: int | None) -> int:
    """How many validation examples an evaluation with `max_samples` (None: all) scores."""
    available = len(run.tokenized["validation"])
    return available if max_samples is None else min(available, max_samples)


def push(output_dir: Path, repo_id: str) -> dict:
    """Upload the saved model; on failure the model is safe on disk and the log says how to retry. Returns what
    results.json gains: nothing, or the push error."""
    try:
        logger.info("Pushed to %s", push_model_folder(output_dir, repo_id))
        return {}
    except (PushError, EnvironmentFailure) as exc:  # the Hub or the network refused: the model is saved
        logger.error("Could not push to the Hub: %s. The model is saved in %s; retry with: vaswani push --model %s "
                     "--hub_model_id %s", exc, output_dir, output_dir, repo_id)  # fmt: skip
        return {"push_error": str(exc)}


def run(argv: list[str] | None = None, prog: str | None = None) -> int:
    """A training run from the command line: exit status 0, 1 when only the final upload to the Hub failed (the model
    is saved), 2 with `error: ...` for a user mistake (`vaswani.errors.run_command`)."""
    return run_command(lambda: 1 if main(argv, prog).get("push_error") else 0)


def batch_stream(sampler: TokenBatchSampler, progress: TrainingProgress):
    """This rank's batches, epoch after epoch, starting at the position stored in `progress` now (read here, not when
    the first batch is asked for, which may happen in the prefetching thread). Yields (epoch, index_in_epoch,
    batch_indices)."""
    return _batches_from(sampler, progress.epoch, progress.batch_in_epoch)


def _batches_from(sampler: TokenBatchSampler, epoch: int, start: int):
    while True:
        batches = sampler.batches(epoch)
        for index in range(start, len(batches)):
            yield epoch, index, batches[index]
        epoch, start = epoch + 1, 0
