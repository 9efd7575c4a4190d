"""transformers' model contract (what its common model and generation tests exercise), checked on a tiny model:
loading the stacks on their own, thread-safe pruning at load time, `get_encoder(modality=...)`, compiled and
exported decoding with a static cache, the cache returned by beam search, untied output projections,
`logits_to_keep`, the attention-backend switch and clear errors."""

import threading

import pytest
import torch
from conftest import random_batch, tiny_config, tiny_model

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import VaswaniDecoder, VaswaniEncoder


# ----------------------------------------------------------------------------------------------------------------
# Loading: the stacks on their own, pruning while other threads load
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stack_class", [VaswaniEncoder, VaswaniDecoder])
def test_a_stack_saves_and_loads_on_its_own(tmp_path, stack_class):
    torch.manual_seed(0)
    stack = stack_class(tiny_config(encoder_layers=3, decoder_layers=3)).eval()
    input_ids, attention_mask, labels = random_batch()
    inputs = (
        dict(input_ids=input_ids, attention_mask=attention_mask)
        if stack_class is VaswaniEncoder
        else dict(input_ids=labels, encoder_hidden_states=torch.randn(3, 7, 16), encoder_attention_mask=attention_mask)
    )
    stack.save_pretrained(tmp_path)
    loaded = stack_class.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(loaded(**inputs).last_hidden_state, stack(**inputs).last_hidden_state)

    side = stack.side
    pruned = stack_class.from_pretrained(tmp_path, **{f"{side}_layers_to_keep": [0, 2]})
    assert len(pruned.layers) == 2 and pruned.config.pruned_layers == {side: [0, 2]}
    for kept, original in zip(pruned.layers, (stack.layers[0], stack.layers[2]), strict=True):
        for (name, a), (_, b) in zip(kept.state_dict().items(), original.state_dict().items(), strict=True):
            torch.testing.assert_close(a, b, msg=name)
    other = "decoder" if side == "encoder" else "encoder"
    with pytest.raises(ValueError, match=f"{other}_layers_to_keep=.* has no {other} stack"):
        stack_class.from_pretrained(tmp_path, **{f"{other}_layers_to_keep": [0]})


def test_concurrent_loads_with_different_layers_to_keep_do_not_interfere(tmp_path):
    full = tiny_model(encoder_layers=4, decoder_layers=4)
    full.save_pretrained(tmp_path)
    requests = {0: [0, 1, 2, 3], 1: [1, 3], 2: [0], 3: [0, 2, 3], 4: None, 5: [2]}
    results, errors = {}, []
    start = threading.Barrier(len(requests))

    def load(i, keep):
        try:
            start.wait()
            results[i] = VaswaniForConditionalGeneration.from_pretrained(tmp_path, encoder_layers_to_keep=keep)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=load, args=item) for item in requests.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    full_state = full.state_dict()
    for i, keep in requests.items():
        kept = keep if keep is not None else [0, 1, 2, 3]
        model = results[i]
        assert model.config.encoder_layers == len(kept) and model.config.decoder_layers == 4
        for new, old in enumerate(kept):
            torch.testing.assert_close(
                model.model.encoder.layers[new].self_attn.qkv_proj.weight,
                full_state[f"model.encoder.layers.{old}.self_attn.qkv_proj.weight"],
            )
