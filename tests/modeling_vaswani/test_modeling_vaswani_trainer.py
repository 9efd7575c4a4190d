"""transformers' `Seq2SeqTrainer` with `DataCollatorForSeq2Seq` trains the model, and gradient accumulation averages
the loss over all target tokens of the accumulated batch (the Trainer passes `num_items_in_batch`), not over
micro-batches: one update with 4 examples equals one update with 2 x 2 accumulated, for targets of different
lengths where the mean of per-micro-batch means would differ."""

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model
from test_pipeline_vaswani import one_torch_thread, tiny_tokenizer  # noqa: F401  (one_torch_thread is an autouse fixture)
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

# Two short targets, then two long ones: the two micro-batches of 2 hold very different numbers of target tokens.
PAIRS = [
    ("the cat sat on the mat", "die"),
    ("a dog runs in the park", "ein Hund"),
    ("the weather is nice today", "das Wetter ist heute schön und wir lesen ein Buch"),
    ("we read a book at home", "wir lesen ein Buch und die Katze sitzt auf der Matte im Park"),
]
LEARNING_RATE = 1.0


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def tiny_seq2seq_model(tokenizer):
    return tiny_model(
        seed=40, vocab_size=len(tokenizer), dropout=0.0, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )  # fmt: skip


def examples(tokenizer) -> list[dict]:
    return [dict(tokenizer(source, text_target=target)) for source, target in PAIRS]


def train(model, tokenizer, output_dir, *, batch_size, accumulation, steps=1, optim="sgd", lr=LEARNING_RATE):
    """`steps` updates of `model` (in place) with a Seq2SeqTrainer over `PAIRS` in their order; returns the trainer."""
    args = Seq2SeqTrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=steps,
        learning_rate=lr,
        optim=optim,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping: the update is exactly lr * gradient
        train_sampling_strategy="sequential",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=examples(tokenizer),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer


def test_seq2seq_trainer_and_collator_train_the_model(tokenizer, tmp_path):
    model = tiny_seq2seq_model(tokenizer)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model)
    batch = collator(examples(tokenizer)[:2])
    # The collator pads labels with -100 and builds decoder inputs with the model's own shift.
    assert (batch["labels"][0] == -100).sum() > 0
    assert torch.equal(batch["decoder_input_ids"], model.prepare_decoder_input_ids_from_labels(batch["labels"]))
    assert (batch["decoder_input_ids"][:, 0] == tokenizer.bos_token_id).all()

    before = copy.deepcopy(model.state_dict())
    trainer = train(model, tokenizer, tmp_path, batch_size=2, accumulation=1, steps=3, optim="adamw_torch", lr=1e-3)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    changed = [name for name, tensor in model.state_dict().items() if not torch.equal(tensor, before[name])]
    assert "model.shared.weight" in changed and "model.decoder.layers.1.ffn.fc2.weight" in changed


def sgd_step(model, batches, normalize):
    """One SGD update computed by hand from the summed label-smoothed cross-entropy of each micro-batch;
    `normalize(token_sum, tokens_in_micro_batch, tokens_in_all)` turns each sum into its share of the loss."""
    model = copy.deepcopy(model).train()
    total = sum(int((batch["labels"] != -100).sum()) for batch in batches)
    for batch in batches:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       decoder_input_ids=batch["decoder_input_ids"]).logits  # fmt: skip
        labels = batch["labels"]
        token_sum = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100,
                                    label_smoothing=model.config.label_smoothing, reduction="sum")  # fmt: skip
        normalize(token_sum, int((labels != -100).sum()), total).backward()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= LEARNING_RATE * parameter.grad
    return model


def max_difference(a, b) -> float:
    return max((a.state_dict()[name] - tensor).abs().max().item() for name, tensor in b.state_dict().items())


def test_gradient_accumulation_averages_over_target_tokens(tokenizer, tmp_path):
    start = tiny_seq2seq_model(tokenizer)
    whole = copy.deepcopy(start)
    train(whole, tokenizer, tmp_path / "whole", batch_size=4, accumulation=1)
    accumulated = copy.deepcopy(start)
    train(accumulated, tokenizer, tmp_path / "accumulated", batch_size=2, accumulation=2)

    collator = DataCollatorForSeq2Seq(tokenizer, model=start)
    data = examples(tokenizer)
    halves = [collator(data[:2]), collator(data[2:])]
    short, long = (int((half["labels"] != -100).sum()) for half in halves)  # target tokens, EOS included
    assert long > 3 * short
    per_token = sgd_step(start, halves, lambda token_sum, _, total: token_sum / total)
    per_micro_batch = sgd_step(start, halves, lambda token_sum, count, _: token_sum / count / len(halves))

    for name, tensor in whole.state_dict().items():
        torch.testing.assert_close(accumulated.state_dict()[name], tensor, atol=2e-6, rtol=1e-5, msg=name)
        torch.testing.assert_close(per_token.state_dict()[name], tensor, atol=2e-6, rtol=1e-5, msg=name)
    # The test can fail: averaging the micro-batch means would give clearly different weights.
    assert max_difference(per_micro_batch, whole) > 100 * max(max_difference(accumulated, whole), 1e-6)
    assert max_difference(whole, start) > 1e-3  # and the update itself is not negligible
