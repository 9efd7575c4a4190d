"""vaswani/hub/model_card.py: the card's "differs from the paper" rows for a pruned model."""

import pytest

from vaswani.hub.model_card import _differences


@pytest.mark.parametrize(("layerdrop", "name"), [
    ({"encoder_layerdrop": 0.2, "decoder_layerdrop": 0.1}, "pruned (LayerDrop)"),
    ({"encoder_layerdrop": 0.2, "decoder_layerdrop": 0.0}, "pruned layers"),  # the decoder was not trained for it
    ({}, "pruned layers"),  # a teacher cut to a student's depth
])  # fmt: skip
def test_pruned_layers_are_called_layerdrop_only_where_the_stacks_were_trained_with_it(layerdrop, name):
    config = {"pruned_layers": {"encoder": [0, 2], "decoder": [1]}, **layerdrop}
    rows = [row for row in _differences(config) if row["paper"] == "no pruning"]
    assert rows == [{"name": name, "value": "encoder: kept [0, 2]; decoder: kept [1]", "paper": "no pruning"}]


def test_a_model_that_was_not_pruned_has_no_pruning_row():
    assert not [row for row in _differences({"encoder_layerdrop": 0.2}) if row["paper"] == "no pruning"]
