"""vaswani/hub/model_card.py: the card's "differs from the paper" rows for a pruned model, and where it says the data came
from."""

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


# -- where the data came from -------------------------------------------------------------------------------------------
RESULTS = {"step": 40, "validation": {"bleu": 20.0, "chrf": 40.0}, "test": {"bleu": 19.0, "chrf": 39.0}}
COMMON = {"source_lang": "en", "target_lang": "es", "max_train_steps": 100}


def card_of(tmp_path, run_args: dict, results: dict = RESULTS):
    """The rendered card of a config-only folder: (its YAML metadata, its body)."""
    import yaml

    from modeling_vaswani import VaswaniConfig
    from vaswani.hub.model_card import render_model_card

    folder = tmp_path / "model"
    VaswaniConfig(d_model=16, encoder_layers=1, decoder_layers=1).save_pretrained(folder)
    card = str(render_model_card(folder, run_args={**COMMON, **run_args}, results=results))
    metadata, body = card.split("---\n")[1:3]
    return yaml.safe_load(metadata), body


def scored_datasets(metadata: dict) -> dict[str, str]:
    [index] = metadata["model-index"]
    found = {}
    for result in index["results"]:
        assert result["dataset"]["type"] == result["dataset"]["name"]
        assert found.setdefault(result["dataset"]["split"], result["dataset"]["name"]) == result["dataset"]["name"]
    return found


@pytest.mark.parametrize(("run_args", "trained_on", "scored_on", "hub_datasets"), [
    # the user's files beside configs/demo.yaml's dataset_name: every split is a file, nothing came from the demo
    ({"dataset_name": "demo", "train_file": "/data/train.jsonl", "validation_file": "/data/dev.jsonl",
      "test_file": "/data/test.jsonl"}, "train.jsonl", {"validation": "dev.jsonl", "test": "test.jsonl"}, None),
    # the built-in dataset alone
    ({"dataset_name": "demo"}, "the built-in demo dataset", {"validation": "vaswani-demo", "test": "vaswani-demo"},
     None),
    # a Hub dataset for the splits no file replaces
    ({"dataset_name": "wmt14", "train_file": "corpus/train.tsv"}, "train.tsv",
     {"validation": "wmt14", "test": "wmt14"}, ["wmt14"]),
    # files only, the validation set aside from the training file
    ({"train_file": "train.jsonl", "test_file": "test.jsonl"}, "train.jsonl",
     {"validation": "train.jsonl", "test": "test.jsonl"}, None),
])  # fmt: skip
def test_the_card_names_the_data_each_split_came_from(tmp_path, run_args, trained_on, scored_on, hub_datasets):
    """A card names the training data and, in the Hub's model-index, each scored split's data as train.py read them
    (`vaswani.data.loading.load_translation_splits`: a split's file wins over --dataset_name), local paths reduced to
    their last part; only a named dataset that some split was read from is listed as a Hub dataset."""
    metadata, body = card_of(tmp_path, run_args)
    assert f"| Data | {trained_on}" in body and "| Updates | 40 |" in body
    assert scored_datasets(metadata) == scored_on
    assert metadata.get("datasets") == hub_datasets
    assert "/data/" not in body and "corpus/" not in body


def test_a_card_without_the_runs_results_gives_the_planned_updates_and_no_scores(tmp_path):
    metadata, body = card_of(tmp_path, {"train_file": "train.jsonl"}, results={})
    assert "| Updates | at most 100 (`--max_train_steps`) |" in body and "model-index" not in metadata


def test_every_option_that_names_a_local_path_is_published_as_its_last_part():
    """`public_run_args` (a pushed run_args.json, the card) reduces each train option that takes a file or folder
    (its metavar says PATH, FILE, DIR or OUT; --config) to its last part: the list covers every such option."""
    from vaswani.hub.model_card import LOCAL_PATH_OPTIONS, public_run_args
    from vaswani.training.options import build_parser

    paths = {action.dest for action in build_parser()._actions if action.dest == "config"
             or any(word in str(action.metavar) for word in ("PATH", "FILE", "DIR", "OUT"))}  # fmt: skip
    assert {"model", "prepared_data", "train_file"} <= paths
    assert paths <= set(LOCAL_PATH_OPTIONS), paths - set(LOCAL_PATH_OPTIONS)
    published = public_run_args({name: f"/home/me/work/{name}-x" for name in paths})
    assert published == {name: f"{name}-x" for name in paths}


def test_the_cleaning_of_the_training_pairs_is_a_row_with_its_options(tmp_path):
    _, body = card_of(tmp_path, {"train_file": "/data/train.jsonl", "max_length_ratio": 1.5, "drop_copies": True,
                                 "drop_duplicates": False, "drop_held_out_sources": True})  # fmt: skip
    assert (
        "| Cleaning | training pairs dropped: with a length ratio over 1.5; untranslated copies of their source; "
        "with the source of a validation or test pair (`--max_length_ratio 1.5 --drop_copies "
        "--drop_held_out_sources`) |"
    ) in body
    _, plain = card_of(tmp_path / "plain", {"train_file": "/data/train.jsonl", "drop_copies": False})
    assert "Cleaning" not in plain
