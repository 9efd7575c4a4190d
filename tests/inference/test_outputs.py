"""`vaswani translate` outputs for MT users: n-best lists with scores (text and JSON lines), word alignments from
cross-attention, and `--mixed_precision` (bfloat16 autocast, refused without native support). Scores are checked against
transformers' own `sequences_scores`, alignments against the cross-attentions `generate()` returns, and the
CTranslate2 backend against the PyTorch one."""

import json

import pytest
import torch
from test_pipeline_vaswani import (  # noqa: F401  (one_torch_thread is an autouse fixture)
    SENTENCES,
    one_torch_thread,
    trained_model_and_tokenizer,
)

from vaswani.cli import main
from vaswani.inference.engines import hard_alignment, word_indices
from vaswani.inference.outputs import format_hypotheses
from vaswani.inference.translator import Translation


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


def run(model_folder, source, tmp_path, *options) -> list[str]:
    output = tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    assert main([*argv, "--no_progress", *options]) == 0
    return output.read_text().splitlines()


def test_nbest_with_scores_matches_transformers_sequences_scores(model_folder, source, tmp_path):
    lines = run(model_folder, source, tmp_path, "--nbest", "3", "--num_beams", "4", "--scores")
    model, tokenizer = trained_model_and_tokenizer()
    expected = []
    for index, sentence in enumerate(SENTENCES):
        if not sentence.strip():
            expected.append((index, "", None))
            continue
        out = model.generate(**tokenizer([sentence], return_tensors="pt"), num_beams=4, num_return_sequences=3,
                             return_dict_in_generate=True, output_scores=True)  # fmt: skip
        texts = tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
        expected += [(index, text, float(score)) for text, score in zip(texts, out.sequences_scores, strict=True)]
    assert len(lines) == len(expected)
    for line, (index, text, score) in zip(lines, expected, strict=True):
        fields = line.split(" ||| ")
        assert fields[:2] == [str(index), text]
        if score is None:
            assert fields[2] == ""
        else:
            assert float(fields[2]) == pytest.approx(score, abs=2e-5)
    # best first within each input line
    scores = {}
    for line in lines:
        index, _, score = line.split(" ||| ")
        if score:
            scores.setdefault(index, []).append(float(score))
    assert all(values == sorted(values, reverse=True) and len(values) == 3 for values in scores.values())


def test_jsonl_holds_the_same_hypotheses(model_folder, source, tmp_path):
    text = run(model_folder, source, tmp_path, "--nbest", "2", "--scores", "--alignment")
    records = [json.loads(line) for line in run(model_folder, source, tmp_path, "--nbest", "2", "--scores",
                                                 "--alignment", "--output_format", "jsonl")]  # fmt: skip
    assert [record["line"] for record in records] == list(range(len(SENTENCES)))
    rebuilt = []
    for record in records:
        if not record["hypotheses"]:
            rebuilt.append(f"{record['line']} |||  |||  ||| ")
        for hypothesis in record["hypotheses"]:
            rebuilt.append(f"{record['line']} ||| {hypothesis['text']} ||| {hypothesis['score']:.6f} ||| "
                           f"{hypothesis['alignment']}")  # fmt: skip
    assert rebuilt == text
    # without --scores / --alignment: the text only, one hypothesis (blank lines: none)
    plain = [
        json.loads(line)["hypotheses"] for line in run(model_folder, source, tmp_path, "--output_format", "jsonl")
    ]
    assert plain == [[{"text": r["hypotheses"][0]["text"]}] if r["hypotheses"] else [] for r in records]


def test_alignment_is_the_argmax_of_the_last_layers_averaged_cross_attention(model_folder, source, tmp_path):
    """Greedy search: the alignment of each target subword is the source subword with the largest head-averaged
    cross-attention of the last decoder layer at the step that produced it, as `generate()` reports it."""
    lines = run(model_folder, source, tmp_path, "--alignment", "--num_beams", "1")
    model, tokenizer = trained_model_and_tokenizer()
    model = model.__class__.from_pretrained(model_folder, attn_implementation="eager").eval()
    for line, sentence in zip(lines, SENTENCES, strict=True):
        index, text, alignment = line.split(" ||| ")
        if not sentence.strip():
            assert (text, alignment) == ("", "")
            continue
        batch = tokenizer([sentence], return_tensors="pt")
        out = model.generate(**batch, num_beams=1, output_attentions=True, return_dict_in_generate=True)
        ids = [t for t in out.sequences[0, 1:].tolist() if t != tokenizer.eos_token_id]
        source_tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0, :-1].tolist())
        target_tokens = tokenizer.convert_ids_to_tokens(ids)
        pairs = set()
        for t in range(len(ids)):
            attention = out.cross_attentions[t][-1][0].mean(0)[-1, :-1]  # last layer, heads averaged, no EOS
            pairs.add((word_indices(source_tokens)[int(attention.argmax())], word_indices(target_tokens)[t]))
        assert alignment == " ".join(f"{i}-{j}" for i, j in sorted(pairs))
        for pair in alignment.split():  # word indices inside both sentences
            i, j = map(int, pair.split("-"))
            assert i < len(sentence.split()) and j < len(text.split())


def test_ctranslate2_gives_the_same_nbest_scores_and_alignments(model_folder, source, tmp_path):
    pytest.importorskip("ctranslate2")
    from vaswani.export.ctranslate2 import export_ctranslate2

    exported = export_ctranslate2(model_folder, tmp_path / "ct2")
    options = ("--scores", "--alignment", "--output_format", "jsonl")
    ours = [json.loads(line) for line in run(model_folder, source, tmp_path, *options)]
    theirs = [json.loads(line) for line in run(exported, source, tmp_path, *options)]
    for a, b in zip(ours, theirs, strict=True):
        assert [h["text"] for h in a["hypotheses"]] == [h["text"] for h in b["hypotheses"]]
        assert [h["alignment"] for h in a["hypotheses"]] == [h["alignment"] for h in b["hypotheses"]]
        # CTranslate2 renormalises the first step without EOS (minimum length 1): a difference of
        # -log(1 - p(EOS first)), tiny for a trained model
        for x, y in zip(a["hypotheses"], b["hypotheses"], strict=True):
            assert x["score"] == pytest.approx(y["score"], abs=5e-3)


def test_word_indices_follow_the_tokenizers_word_boundaries():
    _, tokenizer = trained_model_and_tokenizer()
    for sentence in SENTENCES:
        if not sentence.strip():
            continue
        ids = tokenizer(sentence)["input_ids"][:-1]
        words = word_indices(tokenizer.convert_ids_to_tokens(ids))
        assert words[-1] + 1 == len(sentence.split())
        for k, word in enumerate(sentence.split()):
            assert tokenizer.decode([i for i, w in zip(ids, words, strict=True) if w == k]).strip() == word


def test_hard_alignment_lifts_subword_argmax_to_words():
    source = ["▁new", "york", "▁is", "▁big"]  # words: 0 0 1 2
    target = ["▁nueva", "▁york", "▁es", "▁gran", "de"]  # words: 0 1 2 3 3
    attention = [
        [0.7, 0.1, 0.1, 0.1, 0.0],  # the last column is the source EOS: never aligned
        [0.1, 0.6, 0.1, 0.1, 0.1],
        [0.1, 0.1, 0.7, 0.1, 0.0],
        [0.0, 0.1, 0.1, 0.2, 0.6],
        [0.1, 0.0, 0.0, 0.9, 0.0],
    ]
    assert hard_alignment(source, target, attention) == [(0, 0), (0, 1), (1, 2), (2, 3)]
    assert format_hypotheses(4, [Translation("nueva york es grande", -0.25, [(0, 0), (0, 1)])], scores=True,
                             alignment=True) == ["4 ||| nueva york es grande ||| -0.250000 ||| 0-0 0-1"]  # fmt: skip


def test_bad_output_options_are_refused(model_folder, source, capsys):
    argv = ["translate", "--model", str(model_folder), "--input", str(source)]
    assert main([*argv, "--nbest", "5", "--num_beams", "4"]) == 2
    assert "--nbest 5 needs at least as many beams" in capsys.readouterr().err
    assert main([*argv, "--output_format", "xml"]) == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err
    assert main([*argv, "--nbest", "0"]) == 2


# ---------------------------------------------------------------------------------------------------------------
# --mixed_precision (the old --dtype)
# ---------------------------------------------------------------------------------------------------------------
def test_dtype_is_refused_where_the_cpu_cannot_run_it(model_folder, source, monkeypatch, capsys):
    import vaswani.devices

    monkeypatch.setattr(vaswani.devices, "native_bf16", lambda device_type: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: False, raising=False)
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--device", "cpu"]
    for precision, dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        assert main([*argv, "--mixed_precision", precision]) == 2
        assert (
            f"{dtype} (--mixed_precision {precision}) cannot run natively on cpu with PyTorch"
            in capsys.readouterr().err
        )
    assert main([*argv, "--mixed_precision", "int8"]) == 2
    assert "invalid choice: 'int8'" in capsys.readouterr().err


def test_bfloat16_runs_under_autocast_and_keeps_the_translations(model_folder, source, tmp_path, monkeypatch):
    import vaswani.devices

    monkeypatch.setattr(vaswani.devices, "native_bf16", lambda device_type: True)  # emulated here, but runs
    from modeling_vaswani import VaswaniForConditionalGeneration

    seen = []
    forward = VaswaniForConditionalGeneration.forward

    def spy(self, *args, **kwargs):
        outputs = forward(self, *args, **kwargs)
        seen.append(outputs.logits.dtype)
        return outputs

    monkeypatch.setattr(VaswaniForConditionalGeneration, "forward", spy)
    bf16 = run(model_folder, source, tmp_path, "--mixed_precision", "bf16", "--device", "cpu")
    assert seen and set(seen) == {torch.bfloat16}
    fp32 = run(model_folder, source, tmp_path)
    assert sum(a == b for a, b in zip(bf16, fp32, strict=True)) >= len(SENTENCES) - 1


def test_paper_decoding_on_ctranslate2_says_what_differs(model_folder, source, tmp_path, caplog):
    pytest.importorskip("ctranslate2")
    from vaswani.export.ctranslate2 import export_ctranslate2

    exported = export_ctranslate2(model_folder, tmp_path / "ct2")
    with caplog.at_level("WARNING", logger="vaswani.inference.engines"):
        lines = run(exported, source, tmp_path, "--paper_decoding", "--num_beams", "1")
    assert "CTranslate2 has no GNMT length penalty" in caplog.text
    assert lines == run(model_folder, source, tmp_path, "--paper_decoding", "--num_beams", "1")  # greedy: the same
