"""Switchable normalization (PostNorm/PreNorm, LayerNorm/ScaleNorm, FixNorm), LayerDrop with pruning, and scheduled
DropHead: formulas, statistics, equivalences, saving/loading, data parallelism and bad input."""

import contextlib
import itertools
import json
import math
import os

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO_ROOT, decode_step_by_step, random_batch, run_cpu_ranks, tiny_model
from test_modeling_vaswani import ATTENTION_BACKENDS, torch_reference_stacks, with_backend
from torch import nn

from modeling_vaswani import (
    DropHeadCallback,
    DropHeadScheduler,
    VaswaniConfig,
    VaswaniForConditionalGeneration,
    drophead_rate,
    every_other_layers_to_keep,
    shift_tokens_right,
    sinusoidal_position_table,
)
from modeling_vaswani.modeling_vaswani import DropHead, ScaleNorm

NORM_COMBINATIONS = [
    dict(norm_position=position, norm_type=norm_type, fixnorm=fixnorm)
    for position, norm_type, fixnorm in itertools.product(["post", "pre"], ["layernorm", "scalenorm"], [False, True])
]


def combo_id(options):
    return "-".join(f"{v}" if k != "fixnorm" else ("fixnorm" if v else "nofix") for k, v in options.items())


# ---------------------------------------------------------------------------------------------------------------
# Normalization
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", NORM_COMBINATIONS, ids=combo_id)
def test_every_norm_combination_trains_generates_and_round_trips(options, tmp_path):
    model = tiny_model(seed=20, encoder_drophead=0.2, decoder_drophead=0.2, cross_drophead=0.2, **options)
    input_ids, attention_mask, labels = random_batch(seed=20)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    loss = model(input_ids, attention_mask, labels=labels).loss
    assert torch.isfinite(loss)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, f"no gradient for {name}"
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, f"zero gradient for {name}"
    optimizer.step()

    model.eval()
    generated = model.generate(input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=6)
    assert generated.shape[0] == input_ids.shape[0]
    model.save_pretrained(tmp_path)
    loaded, info = VaswaniForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert {k: getattr(loaded.config, k) for k in options} == options
    assert torch.equal(
        loaded.eval().generate(input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=6), generated
    )


@pytest.mark.parametrize("options", NORM_COMBINATIONS, ids=combo_id)
@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
def test_every_norm_combination_decodes_incrementally(options, backend):
    model = with_backend(tiny_model(seed=21, **options), backend).eval()
    input_ids, attention_mask, labels = random_batch(seed=21)
    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    with torch.no_grad():
        full = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids).logits
        stepwise, _ = decode_step_by_step(model, input_ids, attention_mask, decoder_input_ids)
    torch.testing.assert_close(stepwise, full, atol=1e-5, rtol=1e-5)
    gen = dict(attention_mask=attention_mask, num_beams=3, max_new_tokens=6)
    assert torch.equal(
        model.generate(input_ids, use_cache=True, **gen), model.generate(input_ids, use_cache=False, **gen)
    )


def count_norms(module):
    return sum(isinstance(m, (nn.LayerNorm, ScaleNorm)) for m in module.modules())


@pytest.mark.parametrize("norm_type", ["layernorm", "scalenorm"])
def test_prenorm_has_exactly_one_final_norm_per_stack_postnorm_none(norm_type):
    post = tiny_model(norm_position="post", norm_type=norm_type)
    pre = tiny_model(norm_position="pre", norm_type=norm_type)
    layers = 2
    assert post.model.encoder.layer_norm is None and post.model.decoder.layer_norm is None
    assert count_norms(post.model.encoder) == 2 * layers and count_norms(post.model.decoder) == 3 * layers
    assert count_norms(pre.model.encoder) == 2 * layers + 1 and count_norms(pre.model.decoder) == 3 * layers + 1
    norm_class = nn.LayerNorm if norm_type == "layernorm" else ScaleNorm
    assert isinstance(pre.model.encoder.layer_norm, norm_class) and isinstance(
        pre.model.decoder.layer_norm, norm_class
    )
    # One checkpoint layout: PreNorm only adds the two final norms.
    extra = set(pre.state_dict()) - set(post.state_dict())
    assert set(post.state_dict()) <= set(pre.state_dict())
    assert {k.rsplit(".", 1)[0] for k in extra} == {"model.encoder.layer_norm", "model.decoder.layer_norm"}


def test_prenorm_matches_torch_nn_norm_first_layers_with_a_final_norm():
    model = tiny_model(seed=22, norm_position="pre").eval()
    ref_encoder, ref_decoder = torch_reference_stacks(model, norm_first=True)
    input_ids, attention_mask, labels = random_batch(seed=22)
    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    enc, dec, d = model.model.encoder, model.model.decoder, model.config.d_model
    with torch.no_grad():
        ours = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids)
        pe = sinusoidal_position_table(16, d)
        shared = model.model.shared.weight
        memory = shared[input_ids] * math.sqrt(d) + pe[: input_ids.shape[1]]
        for layer in ref_encoder:
            memory = layer(memory, src_key_padding_mask=attention_mask == 0)
        memory = F.layer_norm(memory, (d,), enc.layer_norm.weight, enc.layer_norm.bias, model.config.layer_norm_eps)
        hidden = shared[decoder_input_ids] * math.sqrt(d) + pe[: decoder_input_ids.shape[1]]
        causal = nn.Transformer.generate_square_subsequent_mask(hidden.shape[1])
        for layer in ref_decoder:
            hidden = layer(hidden, memory, tgt_mask=causal, memory_key_padding_mask=attention_mask == 0)
        hidden = F.layer_norm(hidden, (d,), dec.layer_norm.weight, dec.layer_norm.bias, model.config.layer_norm_eps)
    real = attention_mask.bool()
    torch.testing.assert_close(ours.encoder_last_hidden_state[real], memory[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.logits, hidden @ shared.T, atol=1e-5, rtol=1e-5)


def test_scalenorm_matches_its_formula():
    norm = ScaleNorm(16, eps=1e-5)
    assert norm.scale.item() == pytest.approx(4.0)  # initialised to sqrt(d)
    with torch.no_grad():
        norm.scale.fill_(2.5)
    x = torch.randn(3, 5, 16)
    x[0, 0] = 1e-7  # a vector shorter than eps: the denominator is clamped to eps
    expected = torch.empty_like(x)
    for index in itertools.product(range(3), range(5)):
        vector = x[index]
        expected[index] = 2.5 * vector / max(math.sqrt(sum(v * v for v in vector.tolist())), 1e-5)
    torch.testing.assert_close(norm(x), expected)
    model = tiny_model(norm_type="scalenorm")
    scales = [m.scale.item() for m in model.modules() if isinstance(m, ScaleNorm)]
    assert scales and all(s == pytest.approx(4.0) for s in scales)


def test_fixnorm_uses_unit_rows_for_input_and_output():
    model = tiny_model(seed=23, fixnorm=True, norm_type="scalenorm").eval()
    weight = model.model.shared.weight
    assert weight.abs().max() <= 0.01  # FixNorm init U(-0.01, 0.01); the PAD row is zero
    assert weight[0].abs().max() == 0
    input_ids, attention_mask, labels = random_batch(seed=23)
    decoder_input_ids = shift_tokens_right(labels, 0, 1)
    with torch.no_grad():
        out = model(input_ids, attention_mask, decoder_input_ids=decoder_input_ids, output_hidden_states=True)
        rows = weight[input_ids]
        unit = rows / rows.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        expected_input = unit * math.sqrt(16) + sinusoidal_position_table(input_ids.shape[1], 16)
        torch.testing.assert_close(out.encoder_hidden_states[0], expected_input)
        unit_matrix = weight / weight.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        torch.testing.assert_close(out.logits, out.decoder_hidden_states[-1] @ unit_matrix.T, atol=1e-5, rtol=1e-5)
    real_rows = unit[attention_mask.bool()]
    torch.testing.assert_close(real_rows.norm(dim=-1), torch.ones(real_rows.shape[0]))


def normalizations_of(monkeypatch, matrix: torch.Tensor) -> list[torch.Tensor]:
    """Records every `F.normalize` of a tensor shaped like `matrix` (FixNorm's output rows) from now on."""
    calls, normalize = [], F.normalize

    def recording(tensor, *args, **kwargs):
        if tensor.shape == matrix.shape:
            calls.append(tensor)
        return normalize(tensor, *args, **kwargs)

    monkeypatch.setattr(F, "normalize", recording)
    return calls


@pytest.mark.parametrize("variant", ["seq2seq", "causal_lm"])
def test_fixnorm_decoding_normalizes_the_output_rows_once_with_the_same_outputs(monkeypatch, variant):
    """generate() normalises FixNorm's (V, d) output matrix once, not at each of its steps, and gives exactly the
    tokens and scores of normalising at every step; outside generate() every forward normalises again, as training
    needs (the gradient reaches the embedding through the normalisation)."""
    from test_modeling_vaswani_lm import causal_lm

    from modeling_vaswani.modeling_vaswani import FixNormLinear

    options = {"fixnorm": True, "norm_type": "scalenorm", "norm_position": "pre"}
    if variant == "seq2seq":
        model = tiny_model(seed=31, **options).eval()
        input_ids, attention_mask, _ = random_batch(seed=31)
    else:
        model = causal_lm(seed=31, **options).eval()
        input_ids = torch.randint(4, 99, (3, 5), generator=torch.Generator().manual_seed(31))
        attention_mask = torch.ones_like(input_ids)
    calls = normalizations_of(monkeypatch, model.lm_head.weight)
    decode = dict(attention_mask=attention_mask, num_beams=4, max_new_tokens=6, min_new_tokens=6,
                  output_scores=True, return_dict_in_generate=True)  # fmt: skip
    once = model.generate(input_ids, **decode)
    assert len(calls) == 1
    calls.clear()
    monkeypatch.setattr(FixNormLinear, "rows_normalized_once", lambda self: contextlib.nullcontext())
    every_step = model.generate(input_ids, **decode)
    assert len(calls) >= 6  # one per step
    assert torch.equal(once.sequences, every_step.sequences)
    assert torch.equal(once.sequences_scores, every_step.sequences_scores)
    calls.clear()
    model.train()
    loss = model(input_ids, attention_mask=attention_mask, labels=input_ids).loss
    loss.backward()
    assert len(calls) == 1 and calls[0].requires_grad  # normalised in this forward, in the autograd graph
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0


def test_output_rows_normalized_once_nests_overlaps_across_threads_and_is_not_copied():
    """Scopes nest and overlap (two threads decoding with one model share the rows); per-call normalisation returns
    when the last one closes, whatever the order; a copy made inside a scope normalises per call."""
    import copy
    import threading

    model = tiny_model(seed=32, fixnorm=True, norm_type="scalenorm").eval()
    head = model.lm_head
    with model.output_rows_normalized_once():
        first = head.logit_weight()
        assert head.logit_weight() is first
        torch.testing.assert_close(first, F.normalize(head.weight.detach(), dim=-1), rtol=0, atol=0)
        with model.output_rows_normalized_once():
            assert head.logit_weight() is first
        assert head.logit_weight() is first
        copied = copy.deepcopy(model)
        assert copied.lm_head.logit_weight() is not copied.lm_head.logit_weight()
    assert head.logit_weight() is not head.logit_weight()  # each call normalises again

    entered, leave = threading.Event(), threading.Event()

    def other_thread():  # opens its scope inside the main thread's and closes it after the main thread's has closed
        with model.output_rows_normalized_once():
            entered.set()
            leave.wait(10)

    with model.output_rows_normalized_once():
        thread = threading.Thread(target=other_thread)
        thread.start()
        assert entered.wait(10)
    assert head.logit_weight() is head.logit_weight()  # the other thread's scope is still open
    leave.set()
    thread.join(10)
    assert head.logit_weight() is not head.logit_weight()
    plain = tiny_model(seed=32).eval()  # without FixNorm: nothing to do
    with plain.output_rows_normalized_once():
        assert plain.lm_head.logit_weight() is plain.lm_head.weight


# ---------------------------------------------------------------------------------------------------------------
# LayerDrop
# ---------------------------------------------------------------------------------------------------------------
def test_layerdrop_skip_rate_matches_p():
    p, layers, passes = 0.3, 4, 250
    model = tiny_model(seed=24, encoder_layers=layers, encoder_layerdrop=p).train()
    calls = [0] * layers
    for i, layer in enumerate(model.model.encoder.layers):
        layer.register_forward_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    input_ids = torch.randint(4, 99, (2, 5))
    with torch.no_grad():
        for _ in range(passes):
            model.model.encoder(input_ids=input_ids)
    draws = layers * passes
    skip_rate = 1 - sum(calls) / draws
    assert abs(skip_rate - p) < 4 * math.sqrt(p * (1 - p) / draws)  # 4 standard deviations
    assert all(abs(1 - c / passes - p) < 4 * math.sqrt(p * (1 - p) / passes) for c in calls)


def test_layerdrop_runs_every_layer_in_eval_and_is_deterministic():
    dropping = tiny_model(seed=25, encoder_layerdrop=0.5, decoder_layerdrop=0.5).eval()
    plain = tiny_model(seed=25).eval()
    input_ids, attention_mask, labels = random_batch(seed=25)
    with torch.no_grad():
        a = dropping(input_ids, attention_mask, labels=labels).logits
        b = dropping(input_ids, attention_mask, labels=labels).logits
        c = plain(input_ids, attention_mask, labels=labels).logits
    assert torch.equal(a, b) and torch.equal(a, c)


def test_layerdrop_decisions_come_from_the_shared_seed_and_resume_exactly():
    """Two processes that build the model with the same seed skip the same layers whatever else used the RNG."""

    def decisions(model, n):
        return [model.model.encoder.layerdrop.sample(6, True) for _ in range(n)]

    a = tiny_model(seed=26, encoder_layers=6, encoder_layerdrop=0.5)
    b = tiny_model(seed=99, encoder_layers=6, encoder_layerdrop=0.5)  # other weights, other global RNG use
    torch.rand(1000)
    assert decisions(a, 20) == decisions(b, 20)
    other_seed = tiny_model(encoder_layers=6, encoder_layerdrop=0.5, layerdrop_seed=7)
    assert decisions(other_seed, 20) != decisions(tiny_model(encoder_layers=6, encoder_layerdrop=0.5), 20)
    state = a.layerdrop_state_dict()
    expected = decisions(a, 10)
    a.load_layerdrop_state_dict(state)
    assert decisions(a, 10) == expected


def run_only_layers(model, encoder_keep, decoder_keep):
    """Make the full model run only the listed layers (the reference for pruning)."""
    for stack, keep in ((model.model.encoder, encoder_keep), (model.model.decoder, decoder_keep)):
        stack.layerdrop.sample = lambda n, training, keep=keep: [i not in keep for i in range(n)]
    return model


def test_pruned_model_equals_the_full_model_running_only_the_kept_layers(tmp_path):
    full = tiny_model(seed=27, encoder_layers=4, decoder_layers=4, encoder_layerdrop=0.5, decoder_layerdrop=0.5)
    full.save_pretrained(tmp_path / "full")
    encoder_keep, decoder_keep = [0, 2, 3], [1, 3]
    pruned = VaswaniForConditionalGeneration.from_pretrained(
        tmp_path / "full", encoder_layers_to_keep=encoder_keep, decoder_layers_to_keep=decoder_keep
    ).eval()
    assert (len(pruned.model.encoder.layers), len(pruned.model.decoder.layers)) == (3, 2)
    assert (pruned.config.encoder_layers, pruned.config.decoder_layers) == (3, 2)
    assert pruned.config.encoder_layers_to_keep is None and pruned.config.decoder_layers_to_keep is None
    torch.testing.assert_close(
        pruned.model.encoder.layers[1].ffn.fc1.weight, full.model.encoder.layers[2].ffn.fc1.weight
    )
    reference = run_only_layers(full.eval(), encoder_keep, decoder_keep)
    input_ids, attention_mask, labels = random_batch(seed=27)
    with torch.no_grad():
        expected = reference(input_ids, attention_mask, labels=labels)
        got = pruned(input_ids, attention_mask, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits, atol=0, rtol=0)
    gen = dict(attention_mask=attention_mask, num_beams=4, max_new_tokens=8)
    # The reference decodes without a cache: with layer 0 skipped its cache would report length 0.
    assert torch.equal(pruned.generate(input_ids, **gen), reference.generate(input_ids, use_cache=False, **gen))

    # The pruned model is an ordinary smaller model: layers renumbered 0..k-1, no pruning left in its config.
    pruned.save_pretrained(tmp_path / "pruned")
    saved = json.loads((tmp_path / "pruned" / "config.json").read_text())
    assert saved["encoder_layers"] == 3 and saved["decoder_layers"] == 2
    assert saved["encoder_layers_to_keep"] is None and saved["decoder_layers_to_keep"] is None
    reloaded, info = VaswaniForConditionalGeneration.from_pretrained(tmp_path / "pruned", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not any(k.startswith("model.encoder.layers.3.") for k in reloaded.state_dict())
    assert torch.equal(reloaded.eval().generate(input_ids, **gen), pruned.generate(input_ids, **gen))


def test_pruning_through_the_auto_class_and_in_place(tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    tiny_model(seed=28, encoder_layers=3).save_pretrained(tmp_path)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, encoder_layers_to_keep=[0, 2])
    assert len(model.model.encoder.layers) == 2 and model.config.encoder_layers == 2
    config = VaswaniConfig.from_pretrained(tmp_path)
    model = VaswaniForConditionalGeneration.from_pretrained(tmp_path, config=config, decoder_layers_to_keep=[1])
    assert len(model.model.decoder.layers) == 1
    assert model.model.decoder.layers[0].self_attn.layer_idx == 0  # renumbered for the cache
    in_place = tiny_model(seed=28, encoder_layers=3)
    in_place.prune_layers(encoder_layers_to_keep=every_other_layers_to_keep(3, 0.5))
    assert len(in_place.model.encoder.layers) == 2


@pytest.mark.parametrize(
    ("layers", "rate", "expected"),
    [
        (6, 0.5, [0, 2, 4]),
        (10, 0.2, [0, 1, 2, 3, 5, 6, 7, 8]),
        (6, 0.0, [0, 1, 2, 3, 4, 5]),
        (6, 0.25, [0, 1, 2, 4, 5]),
    ],
)
def test_every_other_strategy(layers, rate, expected):
    assert every_other_layers_to_keep(layers, rate) == expected
    period = math.floor(1 / rate) if rate else None
    for depth in range(1, layers + 1):  # the paper: drop depth d iff d = 0 mod floor(1/p)
        assert ((depth - 1) in expected) == (period is None or depth % period != 0)


@pytest.mark.slow
def test_layerdrop_under_data_parallelism_with_two_cpu_processes(tmp_path):
    """Two gloo processes with different batch shapes: the run completes, both ranks skip the same layers and end
    with the same weights."""
    output = tmp_path / "report.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    script = REPO_ROOT / "tests" / "scripts" / "layerdrop_ddp.py"
    result = run_cpu_ranks(script, [str(output)], processes=2, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["find_unused_parameters"] is True  # chosen by model.uses_layerdrop
    ranks = report["reports"]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    assert all(r["error"] is None for r in ranks), ranks
    decisions = [r["decisions"] for r in ranks]
    assert decisions[0] == decisions[1] and len(decisions[0]) == 12  # 6 steps x (encoder, decoder)
    assert any(any(skip) for _, skip in decisions[0])  # layers really were skipped
    assert ranks[0]["checksum"] == pytest.approx(ranks[1]["checksum"], rel=1e-9)


# ---------------------------------------------------------------------------------------------------------------
# DropHead
# ---------------------------------------------------------------------------------------------------------------
def test_drophead_rate_and_rescaling():
    p, heads, examples = 0.3, 8, 20000
    drophead = DropHead(p).train()
    torch.manual_seed(0)
    out = drophead(torch.ones(examples, 1, heads, 1))[:, 0, :, 0]  # (examples, heads): the scale of each head
    dropped = out == 0
    expected_rate = p - p**heads  # a head is dropped unless every head of its example was (then all are kept)
    assert abs(dropped.float().mean().item() - expected_rate) < 4 * math.sqrt(p * (1 - p) / (examples * heads))
    kept = (~dropped).sum(-1, keepdim=True)
    torch.testing.assert_close(out[~dropped], (heads / kept).expand_as(out)[~dropped])  # kept heads: h / kept
    torch.testing.assert_close(out.sum(-1), torch.full((examples,), float(heads)))  # per example: sums to h
    assert out.mean(0).sub(1).abs().max() < 0.03  # unbiased: the expected scale of every head is 1


def test_drophead_guards_the_all_dropped_case():
    drophead = DropHead(0.99).train()
    torch.manual_seed(0)
    out = drophead(torch.ones(5000, 1, 2, 1))
    assert (out.sum(dim=2) > 0).all()  # never an example with every head dropped
    assert set(out.unique().tolist()) <= {0.0, 1.0, 2.0}


def test_drophead_drops_whole_heads_per_example_inside_attention():
    model = tiny_model(seed=29, encoder_drophead=0.5, attn_implementation="sdpa")
    attention = model.model.encoder.layers[0].self_attn
    seen = {}
    attention.out_proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("x", args[0]))
    hidden = torch.randn(6, 5, 16)
    attention.eval()
    attention(hidden)
    reference = seen["x"].view(6, 5, 4, 4)  # (B, T, heads, d_head)
    attention.train()
    torch.manual_seed(3)
    attention(hidden)
    dropped = seen["x"].view(6, 5, 4, 4)
    for b in range(6):
        zero = [(dropped[b, :, h] == 0).all().item() for h in range(4)]
        assert sum(not z for z in zero) > 0  # some head kept
        kept = 4 - sum(zero)
        for h in range(4):
            expected = torch.zeros(5, 4) if zero[h] else reference[b, :, h] * 4 / kept
            torch.testing.assert_close(dropped[b, :, h], expected)
    assert any((dropped[b, :, h] == 0).all() for b in range(6) for h in range(4))


def test_drophead_leaves_eval_unchanged():
    with_drophead = tiny_model(seed=30, encoder_drophead=0.5, decoder_drophead=0.5, cross_drophead=0.5).eval()
    plain = tiny_model(seed=30).eval()
    input_ids, attention_mask, labels = random_batch(seed=30)
    with torch.no_grad():
        torch.testing.assert_close(
            with_drophead(input_ids, attention_mask, labels=labels).logits,
            plain(input_ids, attention_mask, labels=labels).logits,
            atol=0,
            rtol=0,
        )


def test_drophead_schedule_values():
    p_start, p_end, warmup, total = 0.2, 0.1, 100, 1100
    assert drophead_rate(0, p_start, p_end, warmup, total) == p_start
    assert drophead_rate(50, p_start, p_end, warmup, total) == pytest.approx(0.1)
    assert drophead_rate(warmup, p_start, p_end, warmup, total) == 0.0
    assert drophead_rate(600, p_start, p_end, warmup, total) == pytest.approx(0.05)
    assert drophead_rate(total, p_start, p_end, warmup, total) == pytest.approx(p_end)
    assert drophead_rate(total + 50, p_start, p_end, warmup, total) == pytest.approx(p_end)
    assert drophead_rate(0, p_start, p_end, 0, total) == 0.0  # no warmup: the V starts at its bottom


def test_drophead_scheduler_sets_the_rate_on_the_model():
    model = tiny_model()
    scheduler = DropHeadScheduler(model, 0.3, 0.3, warmup_steps=4, total_steps=10, kinds=("encoder", "cross"))

    def rates(kind):
        return {m.p for m in model._drophead_modules(kind)}

    assert rates("encoder") == {0.3} and rates("cross") == {0.3} and rates("decoder") == {0.0}
    for step in range(1, 11):
        rate = scheduler.step()
        assert rate == pytest.approx(drophead_rate(step, 0.3, 0.3, 4, 10))
        assert rates("encoder") == {rate} and rates("decoder") == {0.0}
    assert scheduler.rate == pytest.approx(0.3)
    state = scheduler.state_dict()
    fresh = DropHeadScheduler(model, 0.3, 0.3, warmup_steps=4, total_steps=10)
    fresh.load_state_dict(state)
    assert fresh.last_step == 10 and rates("decoder") == {fresh.rate} and fresh.rate == pytest.approx(0.3)


def test_drophead_callback_drives_the_schedule_inside_a_trainer(tmp_path):
    from datasets import Dataset
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    model = tiny_model(seed=31)
    input_ids, attention_mask, labels = random_batch(batch_size=4, seed=31)
    dataset = Dataset.from_dict(
        {"input_ids": input_ids.tolist(), "attention_mask": attention_mask.tolist(), "labels": labels.tolist()}
    )
    seen = []

    class Record(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            seen.append((state.global_step, model.model.encoder.layers[0].self_attn.drophead.p))

    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=2,
        warmup_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_strategy="no",
        disable_tqdm=True,
    )
    trainer = Seq2SeqTrainer(
        model=model, args=args, train_dataset=dataset, callbacks=[DropHeadCallback(0.4, 0.2), Record()]
    )
    trainer.train()
    assert [step for step, _ in seen] == list(range(6))
    for step, rate in seen:
        assert rate == pytest.approx(drophead_rate(step, 0.4, 0.2, 2, 6)), (step, rate)


# ---------------------------------------------------------------------------------------------------------------
# Bad input (bad option values given to VaswaniConfig: test_modeling.py's test_config_validation_errors, one table)
# ---------------------------------------------------------------------------------------------------------------
def test_bad_pruning_and_schedule_input(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"encoder_layers_to_keep=\[0, 5\] has indices \[5\]"):
        VaswaniForConditionalGeneration.from_pretrained(tmp_path, encoder_layers_to_keep=[0, 5])
    with pytest.raises(ValueError, match="repeats or reorders"):
        tiny_model().prune_layers(decoder_layers_to_keep=[0, 0])
    with pytest.raises(ValueError, match=r"drop_rate=1.0"):
        every_other_layers_to_keep(6, 1.0)
    model = tiny_model()
    with pytest.raises(ValueError, match=r"DropHead rate for cross attention is 1.5"):
        model.set_drophead(cross=1.5)
    with pytest.raises(ValueError, match=r"p_start=1.0"):
        DropHeadScheduler(model, 1.0, 0.1, 10, 100)
    with pytest.raises(ValueError, match=r"total_steps=5 .*warmup_steps \(10\)"):
        DropHeadScheduler(model, 0.1, 0.1, 10, 5)
    with pytest.raises(ValueError, match=r"kinds=\['self'\]"):
        DropHeadScheduler(model, 0.1, 0.1, 10, 100, kinds=["self"])
