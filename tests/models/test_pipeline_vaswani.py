"""The translation pipeline saved with every model: strings in, strings out (one or a list, batched), the paper's
decoding as an option, over-long inputs truncated; saved by `save_pretrained` (config.json `custom_pipelines` and
pipeline_vaswani.py) so that `pipeline(model=folder, trust_remote_code=True)` finds it.

The helpers at the top build a tiny model folder with a real tokenizer; test_cli.py and test_hub.py use them.
The load in a fresh process without the package is tested on the folder uploaded to the Hub (test_hub.py)."""

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, overfit, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import pipeline
from transformers.testing_utils import CaptureLogger

import modeling_vaswani.modeling_vaswani as modeling
from modeling_vaswani import VaswaniTranslationPipeline
from modeling_vaswani.pipeline_vaswani import TASK, logger
from tokenization import train_bpe_tokenizer

# English-German pairs; the tiny model learns them both ways, so its outputs are real, different and end with EOS.
PAIRS = [
    ("the cat sat on the mat", "die Katze sitzt auf der Matte"),
    ("a dog runs in the park", "ein Hund läuft im Park"),
    ("the weather is nice today", "das Wetter ist heute schön"),
    ("we read a book at home", "wir lesen ein Buch"),
]
TRAINING_PAIRS = PAIRS + [(target, source) for source, target in PAIRS]
# Learned sentences, blank lines and unseen inputs, in an order that length-sorting changes.
SENTENCES = [
    "a dog runs in the park", "", "the cat", "das Wetter ist heute schön", "  ", "wir lesen ein Buch",
    "the weather is nice today", "ein Hund",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# A tiny trained model with a real tokenizer (shared with test_cli.py and test_hub.py)
# ---------------------------------------------------------------------------------------------------------------
def tiny_tokenizer():
    corpus = [sentence for pair in PAIRS for sentence in pair]
    return train_bpe_tokenizer(iterator=corpus, vocab_size=330, min_frequency=1, model_max_length=64)


@functools.cache
def trained_model_and_tokenizer():
    """A tiny model (d_model 32, 2 + 2 layers) trained in a few seconds to translate `TRAINING_PAIRS`, with its
    tokenizer; built once per test session. Callers must not change it (deep-copy it first)."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(
        seed=0, vocab_size=len(tokenizer), d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0,
        label_smoothing=0.0,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    batch = tokenizer([s for s, _ in TRAINING_PAIRS], text_target=[t for _, t in TRAINING_PAIRS], padding=True,
                      return_tensors="pt")  # fmt: skip
    overfit(model, batch, steps=200, lr=1e-2, stop_below=0.05)
    return model.eval(), tokenizer


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One intra-op thread for these tiny tensors: on a small machine shared with other jobs, two threads that wait
    for each other make training and decoding here up to a hundred times slower. (Subprocesses get
    OMP_NUM_THREADS=1.)"""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def save_model_folder(folder: Path):
    """A complete model folder (save_pretrained + tokenizer) of the trained tiny model; returns (model, tokenizer)."""
    model, tokenizer = trained_model_and_tokenizer()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def reference_translations(model, tokenizer, sentences, **generate_kwargs) -> list[str]:
    """Each sentence translated on its own with `model.generate` and decoded ("" for a blank one)."""
    outputs = []
    for sentence in sentences:
        if not sentence.strip():
            outputs.append("")
            continue
        batch = tokenizer([sentence], return_tensors="pt")
        output_ids = model.generate(**batch, **generate_kwargs)
        outputs.append(tokenizer.decode(output_ids[0], skip_special_tokens=True))
    return outputs


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return trained_model_and_tokenizer()


@pytest.fixture
def translate(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    return VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")


# ---------------------------------------------------------------------------------------------------------------
# Strings in, strings out
# ---------------------------------------------------------------------------------------------------------------
def test_the_tiny_model_translates_what_it_learned(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    sources = [source for source, _ in TRAINING_PAIRS]
    got = reference_translations(model, tokenizer, sources)
    assert sum(g == target for g, (_, target) in zip(got, TRAINING_PAIRS, strict=True)) >= 6, got


def test_a_string_gives_a_string_and_a_list_gives_a_list(translate, model_and_tokenizer):
    expected = reference_translations(*model_and_tokenizer, SENTENCES)
    assert len(set(expected) - {""}) >= 5  # the tiny model says different things; the two blank lines give ""
    single = translate(SENTENCES[0])
    assert isinstance(single, str) and single == expected[0] == "ein Hund läuft im Park"
    assert translate(SENTENCES) == expected


def test_batching_gives_the_same_strings_as_one_by_one(translate, model_and_tokenizer):
    expected = reference_translations(*model_and_tokenizer, SENTENCES, num_beams=3, max_new_tokens=12)
    for batch_size in (1, 3, len(SENTENCES)):
        assert translate(SENTENCES, batch_size=batch_size, num_beams=3, max_new_tokens=12) == expected, batch_size


def test_parameters_given_at_construction_apply_to_every_call(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    translate = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu", num_beams=2,
                                           max_new_tokens=3)  # fmt: skip
    expected = reference_translations(model, tokenizer, SENTENCES, num_beams=2, max_new_tokens=3)
    assert translate(SENTENCES, batch_size=2) == expected
    longer = reference_translations(model, tokenizer, SENTENCES[:1], num_beams=2, max_new_tokens=8)
    assert translate(SENTENCES[0], max_new_tokens=8) == longer[0] != expected[0]


def test_blank_inputs_give_empty_strings_without_running_generate(translate, model_and_tokenizer, monkeypatch):
    model, tokenizer = model_and_tokenizer
    expected = reference_translations(model, tokenizer, SENTENCES)
    batch_sizes = []
    generate = model.generate

    def spy(*args, **kwargs):
        batch_sizes.append(len(kwargs["input_ids"]))
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    assert translate("") == "" and translate(" \t ") == ""
    assert translate(["", "  "], batch_size=2) == ["", ""]
    assert batch_sizes == []
    # Blank lines mixed into batches: the others are translated as on their own, and only they reach generate().
    assert translate(SENTENCES, batch_size=len(SENTENCES)) == expected
    assert batch_sizes == [len(SENTENCES) - 2]


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(" \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000"))
)
def test_the_translator_finds_blank_inputs_as_the_pipeline_does(text):
    """vaswani.inference.translator has the pipeline's two rules written again (importing modeling_vaswani imports
    PyTorch, which a CTranslate2 export does not need): both must agree, or `vaswani translate` and the pipeline
    would differ."""
    from modeling_vaswani import pipeline_vaswani
    from vaswani.inference import translator

    assert translator.is_blank(text) is pipeline_vaswani.is_blank(text)


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.integers(0, 5), max_size=12), max_length=st.integers(1, 14), eos=st.none() | st.integers(0, 5))
def test_the_translator_truncates_a_source_as_the_pipeline_does(ids, max_length, eos):
    from modeling_vaswani import pipeline_vaswani
    from vaswani.inference import translator

    ours = translator.truncate_source(ids, max_length, eos)
    assert ours == pipeline_vaswani.truncate_source(ids, max_length, eos) and len(ours) <= max_length


def test_paper_decoding_runs_the_papers_beam_search(translate, model_and_tokenizer, monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs["generation_config"].length_penalty)
        return paper_beam_search(*args, **kwargs)

    paper_beam_search = modeling.paper_beam_search
    expected = reference_translations(*model_and_tokenizer, SENTENCES, paper_decoding=True)
    monkeypatch.setattr(modeling, "paper_beam_search", spy)
    assert translate(SENTENCES, batch_size=4, paper_decoding=True) == expected
    assert calls == [0.6, 0.6]  # two batches, with the paper's alpha from the generation config
    calls.clear()
    translate(SENTENCES, batch_size=4)
    assert calls == []


def test_over_long_inputs_are_truncated_with_a_warning(translate, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    text = "the cat sat on the mat " * 3
    ids = tokenizer(text)["input_ids"]
    assert len(ids) > 6
    truncated = torch.tensor([[*ids[:5], tokenizer.eos_token_id]])
    expected = tokenizer.decode(model.generate(truncated)[0], skip_special_tokens=True)
    with CaptureLogger(logger) as captured:
        assert translate(text, max_source_length=6) == expected
    assert f"An input of {len(ids)} tokens was truncated to max_source_length=6" in captured.out
    with pytest.raises(ValueError, match="max_source_length=1"):
        translate(text, max_source_length=1)


def test_one_translation_per_input_and_only_strings(translate, model_and_tokenizer):
    with pytest.raises(ValueError, match="one translation per input"):
        translate("the cat", num_return_sequences=2)
    model, tokenizer = model_and_tokenizer
    built_with = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu", num_return_sequences=2)
    with pytest.raises(ValueError, match="one translation per input"):
        built_with(["the cat", "a dog"], batch_size=2)
    with pytest.raises(TypeError, match="translates strings"):
        translate([1, 2])


# ---------------------------------------------------------------------------------------------------------------
# Saved with every model
# ---------------------------------------------------------------------------------------------------------------
def test_save_pretrained_saves_the_pipeline(tmp_path):
    save_model_folder(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["custom_pipelines"] == {
        TASK: {"impl": "pipeline_vaswani.VaswaniTranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"]}
    }
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_vaswani.VaswaniForConditionalGeneration"
    package_file = REPO_ROOT / "modeling_vaswani" / "pipeline_vaswani.py"
    assert (tmp_path / "pipeline_vaswani.py").read_bytes() == package_file.read_bytes()


def test_pipeline_save_pretrained_writes_the_same_entry(tmp_path, translate):
    translate.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["custom_pipelines"][TASK]["impl"] == "pipeline_vaswani.VaswaniTranslationPipeline"
    assert (tmp_path / "pipeline_vaswani.py").is_file() and (tmp_path / "tokenizer.json").is_file()


def test_the_task_is_registered_and_the_class_can_be_passed(tmp_path):
    model, tokenizer = save_model_folder(tmp_path)
    translate = pipeline(TASK, model=str(tmp_path), pipeline_class=VaswaniTranslationPipeline, device="cpu")
    assert translate(SENTENCES, batch_size=3) == reference_translations(model, tokenizer, SENTENCES)


@pytest.mark.slow
def test_pipeline_from_a_folder_with_trust_remote_code_and_the_package_installed(tmp_path):
    """`pipeline(model=folder, trust_remote_code=True)` with our package imported first (its classes registered),
    in a fresh process so that the remote-code module cache is a temporary folder. (Without the package: the
    uploaded folder in test_hub.py.)"""
    folder = tmp_path / "model"
    model, tokenizer = save_model_folder(folder)
    expected = reference_translations(model, tokenizer, SENTENCES)
    paper = reference_translations(model, tokenizer, SENTENCES[:4], paper_decoding=True)
    code = f"""
        import json
        import modeling_vaswani
        from transformers import pipeline

        translate = pipeline(model={str(folder)!r}, trust_remote_code=True, device="cpu")
        print(json.dumps({{
            "class": type(translate).__name__,
            "model": type(translate.model).__module__,
            "list": translate({SENTENCES!r}, batch_size=3),
            "single": translate({SENTENCES[0]!r}),
            "paper": translate({SENTENCES[:4]!r}, paper_decoding=True),
        }}))
    """
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HF_MODULES_CACHE", None)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=240)  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["class"] == "VaswaniTranslationPipeline"
    assert got["model"] == "modeling_vaswani.modeling_vaswani"  # the installed package's classes win
    assert got["list"] == expected and got["single"] == expected[0] and got["paper"] == paper
