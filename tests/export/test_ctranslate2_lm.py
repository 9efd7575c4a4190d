"""CTranslate2 export of the one-stack models (`vaswani export --format ctranslate2`, `vaswani.export.ctranslate2`):
a `VaswaniForCausalLM` runs in `ctranslate2.Generator` with our log-probabilities (1e-4) and our greedy tokens for
every norm variant (and the position, activation and embedding options of the seq2seq export), on small models
trained in the test to continue word sequences; the encoder of a `VaswaniEncoderModel` / `VaswaniForMaskedLM` runs
in `ctranslate2.Encoder` with our last hidden states (1e-4); int8 exports load and run; what CTranslate2 cannot run
is refused by name, and `vaswani translate` refuses a one-stack export."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT
from test_pipeline_vaswani import one_torch_thread  # noqa: F401  (an autouse fixture: one thread for tiny tensors)

from modeling_vaswani import (
    VaswaniDecoderConfig,
    VaswaniDecoderModel,
    VaswaniEncoderConfig,
    VaswaniEncoderModel,
    VaswaniForCausalLM,
    VaswaniForMaskedLM,
    VaswaniForSequenceClassification,
)
from tokenization import train_bpe_tokenizer
from vaswani.cli import main
from vaswani.constants import EXPORT_INFO_FILE
from vaswani.devices import ctranslate2_int8_compute_type
from vaswani.errors import ExportError
from vaswani.export.ctranslate2 import VaswaniConverter, export_ctranslate2

ctranslate2 = pytest.importorskip("ctranslate2")

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "runs", "in", "park", "we", "read", "a", "book", "at", "home"]
# Six consecutive words of the cycle, from each start: after two words the rest (and where EOS goes) is determined.
SENTENCES = [" ".join((WORDS * 2)[i : i + 6]) for i in range(len(WORDS))]
MAX_NEW_TOKENS = 24  # inside the position table of 48 even for a model that does not stop

# The norm variants of the issue, and the options the seq2seq export supports that a one-stack model has too.
DECODER_VARIANTS = {
    "post-layernorm": {},
    "pre-layernorm": {"norm_position": "pre"},
    "pre-scalenorm": {"norm_position": "pre", "norm_type": "scalenorm"},
    "post-scalenorm-fixnorm": {"norm_type": "scalenorm", "fixnorm": True},
    "pre-layernorm-fixnorm": {"norm_position": "pre", "fixnorm": True},
    "learned-positions": {"position_embedding_type": "learned"},
    "marian-positions": {"sinusoidal_layout": "concatenated"},
    "fairseq-positions": {"sinusoidal_layout": "fairseq"},
    "gelu-unscaled-untied": {"activation_function": "gelu", "scale_embedding": False, "tie_word_embeddings": False},
    "pruned": {"decoder_layers": 3, "decoder_layers_to_keep": [0, 2]},  # pruned again when the folder is loaded
}
ENCODER_VARIANTS = {
    "post-layernorm": {},
    "pre-layernorm": {"norm_position": "pre"},
    "pre-scalenorm": {"norm_position": "pre", "norm_type": "scalenorm"},
    "post-scalenorm-fixnorm": {"norm_type": "scalenorm", "fixnorm": True},
    "learned-positions-silu": {"position_embedding_type": "learned", "activation_function": "silu"},
    "fairseq-positions": {"sinusoidal_layout": "fairseq"},
    "untied-gelu-tanh": {"tie_word_embeddings": False, "activation_function": "gelu_new"},
}


@functools.cache
def tokenizer():
    return train_bpe_tokenizer(iterator=SENTENCES, vocab_size=300, min_frequency=1, model_max_length=48)


def special_ids() -> dict:
    tok = tokenizer()
    return {"pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}


@functools.cache
def trained_causal_lm(variant: str) -> VaswaniForCausalLM:
    """A tiny causal LM (d_model 32, 2 layers) trained for about a second on `SENTENCES`: it continues a two-word
    prompt with the cycle and stops with EOS. Built once per variant; callers must not change it."""
    torch.manual_seed(0)
    options = {"decoder_layers": 2, **DECODER_VARIANTS[variant]}
    config = VaswaniDecoderConfig(vocab_size=len(tokenizer()), d_model=32, decoder_attention_heads=4,
                                  decoder_ffn_dim=64, max_position_embeddings=48, dropout=0.0, **special_ids(),
                                  **options)  # fmt: skip
    model = VaswaniForCausalLM(config).train()
    batch = tokenizer()(SENTENCES, padding=True, return_tensors="pt")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(120):
        loss = model(**batch, labels=batch["input_ids"]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.02:
            break
    return model.eval()


def save(model, folder):
    model.save_pretrained(folder)
    tokenizer().save_pretrained(folder)
    return folder


def prompts() -> list[list[int]]:
    """The first two words of every sentence, without EOS (a prompt to continue)."""
    return [tokenizer()(" ".join(s.split()[:2]), add_special_tokens=False)["input_ids"] for s in SENTENCES]


def our_greedy_tokens(model, prompt: list[int]) -> list[int]:
    output = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1)
    return [t for t in output[0, len(prompt) :].tolist() if t not in (model.config.eos_token_id,
                                                                       model.config.pad_token_id)]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# Decoder-only: ctranslate2.Generator
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(DECODER_VARIANTS))
def test_causal_lm_export_scores_and_generates_like_our_model(variant, tmp_path):
    model, tok = trained_causal_lm(variant), tokenizer()
    output = export_ctranslate2(save(model, tmp_path / "model"), tmp_path / "ct2")
    info = json.loads((output / EXPORT_INFO_FILE).read_text())
    assert (info["runs_with"], info["architecture"]) == ("ctranslate2.Generator", "VaswaniForCausalLM")
    generator = ctranslate2.Generator(str(output), intra_threads=1)

    # log P(token t | tokens < t) of every token after the first, batched (CTranslate2 pads the shorter rows)
    sequences = [tok(s)["input_ids"] for s in SENTENCES[:4]] + [tok("the cat")["input_ids"]]
    scored = generator.score_batch([tok.convert_ids_to_tokens(ids) for ids in sequences])
    for ids, result in zip(sequences, scored, strict=True):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, atol=1e-4, rtol=0)

    # greedy continuations: the same tokens, and the model learned something (varied outputs, ending with EOS)
    ours = [our_greedy_tokens(model, prompt) for prompt in prompts()]
    results = generator.generate_batch([tok.convert_ids_to_tokens(p) for p in prompts()], max_length=MAX_NEW_TOKENS,
                                       sampling_topk=1, include_prompt_in_result=False)  # fmt: skip
    theirs = [tok.convert_tokens_to_ids(result.sequences[0]) for result in results]
    assert ours == theirs
    assert len({tuple(ids) for ids in ours}) >= 12 and all(0 < len(ids) < MAX_NEW_TOKENS - 4 for ids in ours), ours


def test_an_export_over_an_earlier_export_of_another_kind_holds_only_its_own_vocabulary(model_folder, tmp_path):
    """--overwrite_output_dir with a causal LM over a translation model's export and back: the earlier export's
    vocabulary file (shared_vocabulary.json, vocabulary.json) and record go, so the folder holds what a fresh export
    writes and CTranslate2 reads no vocabulary of the other model."""
    lm = save(trained_causal_lm("pre-layernorm"), tmp_path / "lm")
    output = tmp_path / "ct2"
    assert main(["export", "--model", str(model_folder), "--output_dir", str(output)]) == 0
    for model in (lm, model_folder):
        fresh = export_ctranslate2(model, tmp_path / f"fresh-{model.name}")
        assert main(["export", "--model", str(model), "--output_dir", str(output), "--overwrite_output_dir"]) == 0
        assert sorted(path.name for path in output.iterdir()) == sorted(path.name for path in fresh.iterdir())
        assert (output / EXPORT_INFO_FILE).read_text() == (fresh / EXPORT_INFO_FILE).read_text()
    assert {"shared_vocabulary.json"} <= {path.name for path in output.iterdir()} and not (
        output / "vocabulary.json"
    ).exists()


def test_causal_lm_int8_export_loads_and_generates(tmp_path, capsys):
    folder = save(trained_causal_lm("pre-layernorm"), tmp_path / "model")
    output = tmp_path / "int8"
    assert main(["export", "--model", str(folder), "--output_dir", str(output), "--quantization", "int8"]) == 0
    assert "ctranslate2.Generator" in capsys.readouterr().out
    assert json.loads((output / EXPORT_INFO_FILE).read_text())["quantization"] == "int8"
    generator = ctranslate2.Generator(str(output), intra_threads=1)
    tok = tokenizer()
    results = generator.generate_batch([tok.convert_ids_to_tokens(p) for p in prompts()[:4]], max_length=10,
                                       sampling_topk=1, include_prompt_in_result=False)  # fmt: skip
    assert all(result.sequences[0] for result in results)


# ---------------------------------------------------------------------------------------------------------------
# Encoder-only: ctranslate2.Encoder
# ---------------------------------------------------------------------------------------------------------------
def random_encoder(model_class, variant: str, seed: int = 0, **extra):
    torch.manual_seed(seed)
    config = VaswaniEncoderConfig(vocab_size=len(tokenizer()), d_model=32, encoder_layers=2, encoder_attention_heads=4,
                                  encoder_ffn_dim=64, max_position_embeddings=48, **special_ids(),
                                  **ENCODER_VARIANTS[variant], **extra)  # fmt: skip
    return model_class(config).eval()


def encode_both(model, folder) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """The last hidden states of a right-padded batch: ours (B, S, d), CTranslate2's (B, S', d), and the mask."""
    tok = tokenizer()
    batch = tok(SENTENCES[:3] + ["the cat", "a book at home"], padding=True, return_tensors="pt")
    stack = model if isinstance(model, VaswaniEncoderModel) else model.model
    with torch.no_grad():
        ours = stack(**batch).last_hidden_state.numpy()
    tokens = [tok.convert_ids_to_tokens(ids[mask.bool()].tolist()) for ids, mask in zip(*batch.values(), strict=True)]
    int8 = json.loads((Path(folder) / EXPORT_INFO_FILE).read_text())["quantization"] == "int8"
    compute_type = ctranslate2_int8_compute_type() if int8 else "default"  # int16 where int8 products saturate
    encoder = ctranslate2.Encoder(str(folder), intra_threads=1, compute_type=compute_type)
    theirs = np.array(encoder.forward_batch(tokens).last_hidden_state)
    return ours, theirs, batch["attention_mask"]


@pytest.mark.parametrize("variant", sorted(ENCODER_VARIANTS))
@pytest.mark.parametrize("model_class", [VaswaniEncoderModel, VaswaniForMaskedLM])
def test_encoder_export_computes_our_last_hidden_states(model_class, variant, tmp_path):
    model = random_encoder(model_class, variant)
    output = export_ctranslate2(save(model, tmp_path / "model"), tmp_path / "ct2")
    info = json.loads((output / EXPORT_INFO_FILE).read_text())
    assert (info["runs_with"], info["architecture"]) == ("ctranslate2.Encoder", model_class.__name__)
    said = info["not_exported"] or ""  # also printed by `vaswani export`
    assert ("masked-LM head is not exported" in said) == (model_class is VaswaniForMaskedLM)
    assert ("weights of its own" in said) == (model_class is VaswaniForMaskedLM and variant.startswith("untied"))
    ours, theirs, mask = encode_both(model, output)
    assert theirs.shape == ours.shape
    for row, length in enumerate(mask.sum(-1).tolist()):  # CTranslate2's padding positions are not ours
        np.testing.assert_allclose(theirs[row, :length], ours[row, :length], atol=1e-4, rtol=0)


def test_masked_lm_int8_export_loads_and_runs_and_says_the_head_is_left_out(tmp_path, capsys):
    folder = save(random_encoder(VaswaniForMaskedLM, "pre-layernorm"), tmp_path / "model")
    output = tmp_path / "int8"
    assert main(["export", "--model", str(folder), "--output_dir", str(output), "--quantization", "int8"]) == 0
    printed = capsys.readouterr().out
    assert "ctranslate2.Encoder" in printed and "the masked-LM head is not exported" in printed
    model = random_encoder(VaswaniForMaskedLM, "pre-layernorm")
    ours, theirs, mask = encode_both(model, output)
    assert theirs.shape == ours.shape and np.isfinite(theirs).all()
    assert np.abs(theirs[0, : mask[0].sum()] - ours[0, : mask[0].sum()]).max() < 0.2  # int8: close, not equal


# ---------------------------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------------------------
def last_line(text: str) -> str:
    """The last line of stderr (above it: the progress bars of the test's own save_pretrained)."""
    return text.rstrip("\n").rsplit("\n", 1)[-1]


def test_classifier_and_headless_decoder_are_refused_by_name(tmp_path, capsys):
    classifier = random_encoder(VaswaniForSequenceClassification, "post-layernorm", num_labels=3)
    folder = save(classifier, tmp_path / "classifier")
    assert main(["export", "--model", str(folder), "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert last_line(err).startswith("error: VaswaniForSequenceClassification cannot be exported to CTranslate2: "
                                     "its classification head") and "Traceback" not in err  # fmt: skip
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    torch.manual_seed(0)
    decoder = VaswaniDecoderModel(VaswaniDecoderConfig(vocab_size=len(tokenizer()), d_model=32, decoder_layers=1,
                                                       decoder_attention_heads=4, **special_ids()))  # fmt: skip
    with pytest.raises(ExportError, match="VaswaniDecoderModel cannot be exported to CTranslate2: it has no next"):
        VaswaniConverter(decoder, tokenizer())


def test_a_causal_lm_without_eos_is_refused_and_an_encoder_without_eos_exports(tmp_path):
    """The Generator ends generation at the export's EOS, so a causal LM with eos_token_id=None (it generates until a
    length limit) cannot be exported faithfully and is refused by name; the encoder's export needs no EOS."""
    torch.manual_seed(0)
    config = VaswaniDecoderConfig(vocab_size=len(tokenizer()), d_model=32, decoder_layers=1, decoder_attention_heads=4,
                                  **{**special_ids(), "eos_token_id": None})  # fmt: skip
    folder = save(VaswaniForCausalLM(config), tmp_path / "lm")
    with pytest.raises(ExportError, match=r"^eos_token_id=None: ctranslate2.Generator ends generation at the EOS"):
        export_ctranslate2(folder, tmp_path / "lm-ct2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lm"]  # no output, no staging folder left

    model = random_encoder(VaswaniForMaskedLM, "post-layernorm")
    model = VaswaniForMaskedLM(VaswaniEncoderConfig.from_dict(model.config.to_dict() | {"eos_token_id": None})).eval()
    output = export_ctranslate2(save(model, tmp_path / "encoder"), tmp_path / "encoder-ct2")
    assert json.loads((output / EXPORT_INFO_FILE).read_text())["eos_token_id"] is None
    ours, theirs, mask = encode_both(model, output)
    for row, length in enumerate(mask.sum(-1).tolist()):
        np.testing.assert_allclose(theirs[row, :length], ours[row, :length], atol=1e-4, rtol=0)


def test_activation_without_ctranslate2_equivalent_is_refused_by_name():
    for model in (random_encoder(VaswaniForMaskedLM, "post-layernorm"), trained_causal_lm("post-layernorm")):
        config = model.config.to_dict() | {"activation_function": "quick_gelu"}
        other = type(model)(type(model.config).from_dict(config))
        with pytest.raises(ExportError, match="activation_function='quick_gelu' has no CTranslate2 equivalent"):
            VaswaniConverter(other, tokenizer())


def test_translate_refuses_a_one_stack_export_and_a_one_stack_model(tmp_path, capsys):
    folder = save(trained_causal_lm("post-layernorm"), tmp_path / "model")
    output = export_ctranslate2(folder, tmp_path / "ct2")
    source = tmp_path / "input.txt"
    source.write_text("the cat\n")
    assert main(["translate", "--model", str(output), "--input", str(source), "--no_progress"]) == 2
    err = capsys.readouterr().err
    assert last_line(err).startswith(f"error: {output} is a CTranslate2 export of a VaswaniForCausalLM ('vaswani-decoder'), "
                          "not of a translation model: run it with ctranslate2.Generator")  # fmt: skip
    for trust in ([], ["--trust_remote_code"]):  # the folder's own code would load it: refused all the same
        assert main(["translate", "--model", str(folder), "--input", str(source), "--no_progress", *trust]) == 2
        assert "describes a decoder-only language model ('vaswani-decoder'), which this command does not take" in (
            capsys.readouterr().err
        )


INT8_WITHOUT_VNNI_SCRIPT = """
import os, sys
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "export"), os.path.join(sys.argv[1], "models")]
from vaswani.export.ctranslate2 import import_ctranslate2
import_ctranslate2()  # what the package does before CTranslate2 first loads in a process
print("CT2_USE_MKL", os.environ.get("CT2_USE_MKL"))
import numpy as np
from test_ctranslate2_lm import VaswaniForMaskedLM, encode_both, random_encoder, save
from vaswani.cli import main
model = random_encoder(VaswaniForMaskedLM, "pre-layernorm")
save(model, sys.argv[2] + "/model")
assert main(["export", "--model", sys.argv[2] + "/model", "--output_dir", sys.argv[2] + "/int8",
             "--quantization", "int8"]) == 0
ours, theirs, mask = encode_both(model, sys.argv[2] + "/int8")
print("MAX_DIFF", float(np.abs(theirs[0, : mask[0].sum()] - ours[0, : mask[0].sum()]).max()))
"""


def test_int8_exports_stay_close_on_a_cpu_whose_onednn_has_no_vnni(tmp_path):
    """A Zen 3 emulated (oneDNN limited to AVX2, where CTranslate2 would multiply int8 through oneDNN's saturating
    16-bit intermediates: 0.70 off float32 in this test): the package sends CTranslate2's int8 products to MKL
    before CTranslate2 loads (`vaswani.devices.ctranslate2_environment`), and the int8 encoder stays within the bound
    that holds with VNNI."""
    env = {k: v for k, v in os.environ.items() if k != "CT2_USE_MKL"}
    env.update(ONEDNN_MAX_CPU_ISA="AVX2", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", INT8_WITHOUT_VNNI_SCRIPT, str(Path(__file__).parent.parent), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=240, cwd=REPO_ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CT2_USE_MKL 1" in done.stdout
    assert float(done.stdout.split("MAX_DIFF")[-1]) < 0.2
