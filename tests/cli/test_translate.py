"""The `vaswani` command line: translate (files and stdin, order kept through length batching, empty lines, the
paper's decoding, over-long lines), prune, card, average, and every bad input (exit status 2, `error: ...`, no
traceback). Translations are checked against `model.generate` run sentence by sentence in the test."""

import json
import logging
import os
import pty
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, generation_warnings, random_batch, tiny_model
from safetensors.torch import save_model
from test_checkpoints import mean_of, perturbed_states
from test_modeling_vaswani_options import run_only_layers
from test_pipeline_vaswani import (  # noqa: F401  (one_torch_thread is an autouse fixture)
    SENTENCES,
    one_torch_thread,
    reference_translations,
    tiny_tokenizer,
    trained_model_and_tokenizer,
)
from tokenizers import Tokenizer

import modeling_vaswani.modeling_vaswani as modeling
from modeling_vaswani import VaswaniForConditionalGeneration
from tokenization.bpe import first_tokens
from vaswani.cli import main
from vaswani.inference.outputs import one_line
from vaswani.inference.translator import Translator, read_lines
from vaswani.model_folder import check_model_folder
from vaswani.training.checkpoints import CheckpointManager


def write_lines(path: Path, lines: list[str], ending: str = "\n") -> Path:
    path.write_bytes("".join(line + ending for line in lines).encode("utf-8"))
    return path


def read_output(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8")
    assert text == "" or text.endswith("\n")
    return text.split("\n")[:-1]


def expected_lines(sentences, **generate_kwargs) -> list[str]:
    return [one_line(text) for text in reference_translations(*trained_model_and_tokenizer(), sentences,
                                                               **generate_kwargs)]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# vaswani translate
# ---------------------------------------------------------------------------------------------------------------
def test_translate_a_file_keeps_the_order_through_length_batching(model_folder, tmp_path, capsys, monkeypatch):
    batches = []
    generate = Translator._generate

    def record(self, sources, *args):
        batches.append([len(ids) for ids in sources])
        return generate(self, sources, *args)

    monkeypatch.setattr(Translator, "_generate", record)
    sentences = [*SENTENCES, "the cat sat on the mat", "ein Hund läuft im Park"]
    source = write_lines(tmp_path / "input.txt", sentences)
    output = tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    assert main([*argv, "--max_tokens", "24", "--buffer_lines", "6"]) == 0
    assert read_output(output) == expected_lines(sentences)
    # Two buffers (6 and 4 lines, 2 blank): in each, batches of at most 24 padded tokens, longest sentences first.
    assert len(batches) > 2 and all(len(sizes) * sizes[0] <= 24 or len(sizes) == 1 for sizes in batches)
    assert all(sizes == sorted(sizes, reverse=True) for sizes in batches)
    assert sum(later[0] > earlier[-1] for earlier, later in zip(batches, batches[1:], strict=False)) <= 1
    err = capsys.readouterr().err
    assert f"{len(sentences)}/{len(sentences)}" in err  # the progress bar, on stderr


def test_translate_crlf_and_a_lone_carriage_return(model_folder, tmp_path):
    """Lines end at "\\n" (a "\\r\\n" ending is removed); a lone "\\r" inside a sentence does not split it."""
    source = tmp_path / "input.txt"
    source.write_bytes(b"a dog runs in the park\r\nthe cat\rsat\r\n\r\nwir lesen ein Buch")
    output = tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    assert main([*argv, "--no_progress"]) == 0
    lines = ["a dog runs in the park", "the cat\rsat", "", "wir lesen ein Buch"]
    assert read_output(output) == expected_lines(lines)


def test_translate_options_reach_generate(model_folder, tmp_path):
    source = write_lines(tmp_path / "input.txt", SENTENCES)
    output = tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    assert (
        main([*argv, "--num_beams", "2", "--length_penalty", "1.5", "--max_new_tokens", "3", "--device", "cpu"]) == 0
    )
    expected = expected_lines(SENTENCES, num_beams=2, length_penalty=1.5, max_new_tokens=3)
    assert read_output(output) == expected != expected_lines(SENTENCES)


@pytest.mark.parametrize("decoding", [[], ["--paper_decoding"]], ids=["generate", "paper"])
def test_greedy_translation_gives_generate_no_length_penalty_to_warn_about(decoding, model_folder, tmp_path,
                                                                          monkeypatch):  # fmt: skip
    """--num_beams 1 decodes greedily, as `generate(num_beams=1)` does, without passing the default `length_penalty`
    (a beam search option): transformers warned every greedy user that "generation flags are not valid"."""
    warned = generation_warnings(monkeypatch)
    source = write_lines(tmp_path / "input.txt", SENTENCES)
    output = tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    assert main([*argv, "--num_beams", "1", *decoding]) == 0
    assert read_output(output) == expected_lines(SENTENCES, num_beams=1, paper_decoding=bool(decoding))
    assert warned == []


def test_translate_paper_decoding(model_folder, tmp_path, monkeypatch):
    calls = []
    paper_beam_search = modeling.paper_beam_search

    def spy(*args, **kwargs):
        calls.append(kwargs["generation_config"].length_penalty)
        return paper_beam_search(*args, **kwargs)

    expected = expected_lines(SENTENCES, paper_decoding=True, length_penalty=1.0)
    monkeypatch.setattr(modeling, "paper_beam_search", spy)
    source = write_lines(tmp_path / "input.txt", SENTENCES)
    output = tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    assert main([*argv, "--paper_decoding", "--length_penalty", "1.0"]) == 0
    assert read_output(output) == expected
    assert calls and set(calls) == {1.0}


def test_over_long_lines_are_truncated_with_a_warning(model_folder, tmp_path, capsys):
    model, tokenizer = trained_model_and_tokenizer()
    long_line = "the cat sat on the mat " * 3
    longer = "the cat sat on the mat " * (tokenizer.model_max_length // 4)  # over the tokenizer's model_max_length
    assert len(tokenizer(longer, verbose=False)["input_ids"]) > tokenizer.model_max_length
    ids = tokenizer(long_line)["input_ids"]
    truncated = torch.tensor([[*ids[:5], tokenizer.eos_token_id]])
    expected = tokenizer.decode(model.generate(truncated)[0], skip_special_tokens=True)
    source = write_lines(tmp_path / "input.txt", ["a dog", long_line, "", longer])
    output = tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    transformers_records = []  # transformers' own logger: its handler holds whatever stderr was when it was made
    handler = logging.Handler(logging.WARNING)
    handler.emit = transformers_records.append
    logging.getLogger("transformers").addHandler(handler)
    try:
        assert main([*argv, "--max_source_length", "6", "--no_progress"]) == 0
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert read_output(output) == [*expected_lines(["a dog"]), expected, "", expected]
    err = capsys.readouterr().err
    assert "warning: line(s) 2, 4 are longer than 6 tokens and were truncated (see --max_source_length)" in err
    # transformers' warning that such a sequence "will result in indexing errors": wrong, it is truncated
    assert not [r.getMessage() for r in transformers_records if "indexing errors" in r.getMessage()]


def test_split_sentences_translates_each_sentence_of_a_line_and_keeps_the_lines_spacing(model_folder, tmp_path,
                                                                                        capsys):  # fmt: skip
    """--split_sentences: each line is cut as the server cuts a text (`split_text`), its sentences translated one by
    one (the reference: the Translator on the sentences alone) and put back with the line's spacing; a blank line
    stays blank, and a warning about a truncated sentence names its line."""
    from vaswani.inference.text import split_text

    first, second = SENTENCES[2], SENTENCES[0]  # "the cat", "a dog runs in the park"
    lines = [f"{first}. {second.capitalize()}!", "", f"  {second}?   {first.capitalize()}.", first]
    source, output = write_lines(tmp_path / "input.txt", lines), tmp_path / "output.txt"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--no_progress", "--num_beams", "2"]
    assert main([*argv, "--split_sentences", "--buffer_lines", "2", "--output", str(output)]) == 0
    translator = Translator(model_folder, device="cpu")
    splits = [split_text(line) for line in lines]
    assert [len(split.sentences) for split in splits] == [2, 0, 2, 1]
    expected = [split.join(translator.translate(split.sentences, num_beams=2)) for split in splits]
    assert read_output(output) == expected
    assert expected[2].startswith("  ") and "   " in expected[2]  # the line's own spacing, kept
    whole = tmp_path / "whole.txt"
    assert main([*argv, "--output", str(whole)]) == 0
    assert read_output(whole)[0] != expected[0]  # a line translated whole is another translation
    # a truncated sentence: the warning names the line (3), not the sentence's place in the stream (4)
    long_line = f"{first}. {'the cat sat on the mat ' * 3}."
    write_lines(source, [first, "", long_line])
    capsys.readouterr()
    assert main([*argv, "--split_sentences", "--max_source_length", "6", "--output", str(output)]) == 0
    assert "warning: line(s) 3 are longer than 6 tokens" in capsys.readouterr().err


def test_split_sentences_keeps_the_abbreviations_of_the_models_source_language_or_source_lang(model_folder,
                                                                                                 tmp_path, capsys):  # fmt: skip
    """By default the language of the model's run_args.json (de: the ordinal "3." does not end a sentence; en: it
    does), --source_lang another; a folder without run_args.json splits by English's abbreviations."""
    import json
    import shutil

    line = "Am 3. Oktober kommt Dr. Weber. Dann geht er."
    source, output = write_lines(tmp_path / "input.txt", [line]), tmp_path / "output.txt"
    translator = Translator(model_folder, device="cpu")
    assert not (model_folder / "run_args.json").exists()  # (a model saved by the tests' own training)
    english, german = tmp_path / "en-de", tmp_path / "de-en"
    for folder, pair in ((english, ("en", "de")), (german, ("de", "en"))):
        shutil.copytree(model_folder, folder)
        (folder / "run_args.json").write_text(json.dumps({"source_lang": pair[0], "target_lang": pair[1]}))
    whole = ["Am 3. Oktober kommt Dr. Weber.", "Dann geht er."]
    cut = ["Am 3.", "Oktober kommt Dr. Weber.", "Dann geht er."]
    for model, extra, sentences in (
        (german, [], whole), (english, [], cut), (german, ["--source_lang", "en"], cut),
        (english, ["--source_lang", "de"], whole), (model_folder, [], cut), (model_folder, ["--source_lang", "de"], whole),
    ):  # fmt: skip
        argv = ["translate", "--model", str(model), "--input", str(source), "--no_progress", "--split_sentences"]
        assert main([*argv, *extra, "--output", str(output)]) == 0
        assert read_output(output) == [" ".join(translator.translate(sentences))], (model, extra)
    for extra, said in ((["--source_lang", "de"], "--source_lang says whose abbreviations --split_sentences keeps"),
                        (["--source_lang", "d e", "--split_sentences"], "--source_lang 'd e' is not a language code")):  # fmt: skip
        assert main(["translate", "--model", str(model_folder), "--input", str(source), *extra]) == 2
        assert f"error: {said}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        (["--nbest", "2", "--num_beams", "2"], "--nbest"),
        (["--scores", "--alignment"], "--scores or --alignment"),
        (["--output_format", "jsonl"], "--output_format jsonl"),
        (["--prefix", "{input}"], "--prefix"),
        (["--input_format", "jsonl"], "--input_format jsonl"),
    ],
)
def test_split_sentences_refuses_what_needs_a_lines_own_translation(model_folder, tmp_path, capsys, extra, refused):
    source = write_lines(tmp_path / "input.txt", ["a dog. a cat."])
    extra = [argument.format(input=source) for argument in extra]
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--split_sentences", *extra]
    assert main([*argv, "--output", str(tmp_path / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert f"error: --split_sentences does not go with {refused} (a line's sentences" in err, err
    assert not (tmp_path / "out.txt").exists()


def test_empty_input_gives_empty_output(model_folder, tmp_path):
    source, output = tmp_path / "empty.txt", tmp_path / "output.txt"
    source.write_bytes(b"")
    assert main(["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]) == 0
    assert output.read_bytes() == b""


def test_line_helpers():
    assert list(read_lines(["a\n", "b\r\n", "c\rd\n", "\n", "last"])) == ["a", "b", "c\rd", "", "last"]
    assert one_line("one\ntwo\r\nthree\rfour") == "one two three four"
    assert list(Translator._batches({0: [1] * 5, 1: [1] * 2, 2: [1] * 9, 3: [1] * 3}, batch_tokens=10)) == [
        [2],
        [0, 3],
        [1],
    ]


def test_learned_positions_keep_inputs_and_outputs_inside_the_table(tmp_path):
    """A model with learned positions raises past its table; the translator truncates the input to the table and
    caps the output there too (this untrained model never emits EOS, so it always reaches the cap)."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(
        seed=34, vocab_size=len(tokenizer), position_embedding_type="learned", max_position_embeddings=12
    )
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    translator = Translator(tmp_path, device="cpu")
    lengths, generate = [], translator.model.generate

    def record(*args, **kwargs):
        output = generate(*args, **kwargs)
        lengths.append(output.shape[1])
        return output

    translator.model.generate = record
    for paper_decoding in (False, True):
        truncated = []
        sentences = ["the weather is nice today and we read a book", "a dog"]
        translator.translate(sentences, paper_decoding=paper_decoding, on_truncated=truncated.extend)
        assert truncated == [0]
    assert lengths and max(lengths) == 12  # the start token and 11 generated tokens: positions 0..11


@pytest.mark.slow
def test_the_console_script_translates_stdin_to_stdout(model_folder, tmp_path):
    executable = Path(sys.executable).with_name("vaswani")
    command = [str(executable)] if executable.exists() else [sys.executable, "-m", "vaswani.cli"]
    sentences = ["das Wetter ist heute schön", "", "a dog runs in the park", "  ", "wir lesen ein Buch"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*command, "translate", "--model", str(model_folder)], input="\n".join(sentences).encode(),
                            capture_output=True, cwd=tmp_path, env=env, timeout=240)  # fmt: skip
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert result.stdout.decode("utf-8").split("\n")[:-1] == expected_lines(sentences)
    assert "Traceback" not in stderr and "line/s" not in stderr  # no progress bar for stdin


def read_line_within(stream, seconds: float) -> str:
    """The next line of the pipe `stream`, or a failure when none comes within `seconds`."""
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"no output line within {seconds} s"
    return stream.readline().decode("utf-8").removesuffix("\n")


@pytest.mark.parametrize("stdin", ["terminal", "pipe"])
def test_each_line_is_translated_as_soon_as_it_is_sent(model_folder, tmp_path, stdin):
    """Someone typing at a terminal (by default), or a program that sends a line and waits for its translation
    (`--buffer_lines 1`), reads each translation before the next line is sent, while the input stays open."""
    executable = Path(sys.executable).with_name("vaswani")
    command = [str(executable)] if executable.exists() else [sys.executable, "-m", "vaswani.cli"]
    sentences = ["a dog runs in the park", "wir lesen ein Buch", "the cat sat on the mat"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    if stdin == "terminal":
        controller, terminal = pty.openpty()  # a pseudo-terminal: the command's stdin is a tty, as in a shell
        process = subprocess.Popen([*command, "translate", "--model", str(model_folder)], stdin=terminal,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)  # fmt: skip
        os.close(terminal)
        send = lambda text: os.write(controller, text.encode())  # noqa: E731
    else:
        process = subprocess.Popen([*command, "translate", "--model", str(model_folder), "--buffer_lines", "1"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   cwd=tmp_path, env=env)  # fmt: skip

        def send(text):
            process.stdin.write(text.encode())
            process.stdin.flush()

    try:
        for sentence, translation in zip(sentences, expected_lines(sentences), strict=True):
            send(sentence + "\n")
            assert read_line_within(process.stdout, 120) == translation
        if stdin == "terminal":
            send("\x04")  # Ctrl-D at the start of a line: the end of the input
        else:
            process.stdin.close()
        assert process.wait(timeout=60) == 0, process.stderr.read().decode()
        assert process.stdout.read() == b""
        prompt = "Type a sentence and press Enter to translate it; Ctrl-D ends."
        assert (prompt in process.stderr.read().decode()) == (stdin == "terminal")
    finally:
        if process.poll() is None:
            process.kill()
        if stdin == "terminal":
            os.close(controller)


# ---------------------------------------------------------------------------------------------------------------
# vaswani prune, card, average
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture
def layerdrop_folder(tmp_path):
    """A 4 + 4 layer model trained with LayerDrop, saved with its tokenizer, training record and card."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(seed=31, vocab_size=len(tokenizer), encoder_layers=4, decoder_layers=4,
                       encoder_layerdrop=0.5, decoder_layerdrop=0.5)  # fmt: skip
    folder = tmp_path / "full"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "run_args.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de", "max_train_steps": 7}))
    (folder / "results.json").write_text(json.dumps({"test": {"bleu": 30.0}, "step": 5}))
    return folder, model


def test_prune_keeps_the_listed_layers(layerdrop_folder, tmp_path, capsys):
    folder, full = layerdrop_folder
    output = tmp_path / "pruned"
    argv = ["prune", "--model", str(folder), "--output_dir", str(output)]
    assert main([*argv, "--encoder_layers_to_keep", "0,2,3", "--decoder_layers_to_keep", "1,3"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "encoder: kept layers [0, 2, 3] of 4",
        "decoder: kept layers [1, 3] of 4",
        f"wrote the pruned model to {output}",
    ]
    pruned, info = VaswaniForConditionalGeneration.from_pretrained(output, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert (len(pruned.model.encoder.layers), len(pruned.model.decoder.layers)) == (3, 2)
    assert pruned.config.pruned_layers == {"encoder": [0, 2, 3], "decoder": [1, 3]}
    reference = run_only_layers(full.eval(), [0, 2, 3], [1, 3])
    input_ids, attention_mask, labels = random_batch(seed=31, vocab_size=full.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(
            pruned.eval()(input_ids, attention_mask, labels=labels).logits,
            reference(input_ids, attention_mask, labels=labels).logits,
            atol=0,
            rtol=0,
        )
    # An ordinary model folder: tokenizer, training arguments, modeling code and a card that shows the pruning; the
    # full model's scores are not copied.
    for name in ("tokenizer.json", "tokenizer_config.json", "run_args.json"):
        assert (output / name).read_bytes() == (folder / name).read_bytes()
    assert (output / "pipeline_vaswani.py").is_file() and not (output / "results.json").exists()
    card = (output / "README.md").read_text()
    row = next(line for line in card.splitlines() if line.startswith("| `pruned (LayerDrop)` |"))
    assert "encoder: kept [0, 2, 3]" in row and "decoder: kept [1, 3]" in row and row.endswith("| no pruning |")
    # named after its folder (not the staging folder it was written in); no results.json: the planned updates only
    assert "\n# pruned\n" in card and 'from_pretrained("pruned")' in card and ".tmp" not in card
    assert "| Updates | at most 7 (`--max_train_steps`) |" in card


def test_prune_every_other_layer_of_one_stack(layerdrop_folder, tmp_path):
    folder, _ = layerdrop_folder
    output = tmp_path / "pruned"
    argv = ["prune", "--model", str(folder), "--output_dir", str(output), "--every_other", "0.5"]
    assert main([*argv, "--stacks", "encoder"]) == 0
    pruned = VaswaniForConditionalGeneration.from_pretrained(output)
    assert (pruned.config.encoder_layers, pruned.config.decoder_layers) == (2, 4)
    assert pruned.config.pruned_layers == {"encoder": [0, 2]}  # drop depths 2 and 4 (d = 0 mod floor(1 / 0.5))


@pytest.mark.parametrize(
    "options",
    [{}, {"final_logits_bias": True}, {"share_embeddings": False, "tie_word_embeddings": False}],
    ids=["tied", "output-bias", "three-matrices"],
)
def test_prune_keeps_the_first_tokens_of_the_vocabulary(layerdrop_folder, tmp_path, capsys, options):
    """--vocab_size N: the tokenizer's first N ids (`first_tokens`) and the first N rows of every embedding (and of
    the output bias), so that on text of those ids the pruned model gives the full model's logits over them; with
    layers pruned in the same call."""
    folder, full = layerdrop_folder
    if options:  # the same folder with another model in it
        full = tiny_model(seed=34, vocab_size=full.config.vocab_size, encoder_layers=4, decoder_layers=4, **options)
        full.save_pretrained(folder)
    source = Tokenizer.from_file(str(folder / "tokenizer.json"))
    state = json.loads(source.to_str())
    first_merge = state["model"]["vocab"]["".join(state["model"]["merges"][0])]
    size = (first_merge + full.config.vocab_size) // 2
    output = tmp_path / "pruned"
    argv = ["prune", "--model", str(folder), "--output_dir", str(output), "--vocab_size", str(size)]
    assert main([*argv, "--decoder_layers_to_keep", "0,1,2,3"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "encoder: kept all layers of 4",
        "decoder: kept layers [0, 1, 2, 3] of 4",
        f"vocabulary: kept the first {size} tokens of {full.config.vocab_size}",
        f"wrote the pruned model to {output}",
    ]
    check_model_folder(output)  # the tokenizer fits the config
    pruned = VaswaniForConditionalGeneration.from_pretrained(output)
    assert pruned.config.vocab_size == size == Tokenizer.from_file(str(output / "tokenizer.json")).get_vocab_size()
    assert torch.equal(pruned.get_input_embeddings().weight, full.get_input_embeddings().weight[:size])
    input_ids, attention_mask, labels = random_batch(seed=32, vocab_size=size)
    with torch.no_grad():
        torch.testing.assert_close(
            pruned.eval()(input_ids, attention_mask, labels=labels).logits,
            full.eval()(input_ids, attention_mask, labels=labels).logits[..., :size],
        )
    cut = Tokenizer.from_file(str(output / "tokenizer.json"))
    assert cut.to_str() == first_tokens(source, size).to_str()
    for sentence in SENTENCES:
        assert max(cut.encode(sentence).ids) < size
        assert cut.decode(cut.encode(sentence).ids) == source.decode(source.encode(sentence).ids)
    assert (output / "tokenizer_config.json").read_bytes() == (folder / "tokenizer_config.json").read_bytes()


def test_card_renders_the_model_card(model_folder, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(model_folder, folder)
    assert main(["card", "--model", str(folder), "--hub_model_id", "me/tiny", "--license", "mit"]) == 0
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "license: mit" in card and 'from_pretrained("me/tiny")' in card and "--paper_decoding" in card
    assert capsys.readouterr().out == f"wrote the model card to {folder / 'README.md'}\n"
    other = tmp_path / "CARD.md"
    assert main(["card", "--model", str(folder), "--output", str(other)]) == 0
    assert 'from_pretrained("model")' in other.read_text(encoding="utf-8")
    assert (folder / "README.md").read_text(encoding="utf-8") == card


def test_average_through_the_vaswani_command(tmp_path, capsys):
    run = tmp_path / "run"
    model = tiny_model(seed=32)
    model.save_pretrained(run)
    manager = CheckpointManager(run / "checkpoints")
    states = []
    for step in (100, 200, 300):
        states += perturbed_states(model, 1)
        manager.save(step, lambda checkpoint: save_model(model, str(checkpoint / "model.safetensors")))
    output = tmp_path / "averaged"
    assert main(["average", "--run_dir", str(run), "--last", "2", "--output_dir", str(output)]) == 0
    assert capsys.readouterr().out == f"wrote the averaged model to {output}\n"
    averaged = VaswaniForConditionalGeneration.from_pretrained(output)
    for name, tensor in averaged.state_dict().items():
        torch.testing.assert_close(tensor, mean_of(states[-2:], name))
    assert (output / "pipeline_vaswani.py").is_file()  # a complete folder, ready for `vaswani push`


# ---------------------------------------------------------------------------------------------------------------
# Bad input: exit status 2, "error: ...", no traceback
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broken_folders(tmp_path_factory, model_folder):
    root = tmp_path_factory.mktemp("broken")
    for name, missing in (("no_weights", "model.safetensors"), ("no_tokenizer", "tokenizer.json")):
        shutil.copytree(model_folder, root / name)
        (root / name / missing).unlink()
    (root / "empty").mkdir()
    shutil.copytree(model_folder, root / "other_tokenizer")  # the model's vocabulary is smaller than the tokenizer's
    tiny_model(seed=33).save_pretrained(root / "other_tokenizer")
    (root / "latin1.txt").write_bytes("Grüße\n".encode("latin-1"))
    return root


TRANSLATE = ["translate", "--model", "{model}"]
PRUNE = ["prune", "--model", "{model}", "--output_dir", "{root}/p"]
BAD_INPUTS = {
    "missing-model": (["translate", "--model", "{root}/nowhere"], "error: no such model folder: .*nowhere"),
    "missing-model-or-repo": (
        ["translate", "--model", "nowhere/model"],
        r"no such model folder: nowhere/model \(models are read from local folders only",
    ),
    "not-a-model": (
        ["translate", "--model", "{root}/empty"],
        r"is not a model folder \(no config.json\): give a folder that vaswani train, convert or average wrote",
    ),
    "no-weights": (["translate", "--model", "{root}/no_weights"], r"has no model weights \(model.safetensors\)"),
    "no-tokenizer": (["translate", "--model", "{root}/no_tokenizer"], r"has no tokenizer \(tokenizer.json\)"),
    "other-tokenizer": (["translate", "--model", "{root}/other_tokenizer"], "does not fit the model"),
    "missing-input": ([*TRANSLATE, "--input", "{root}/missing.txt"], "error: no such input file"),
    "input-folder": ([*TRANSLATE, "--input", "{root}"], "error: input file .* is a folder: give a file"),
    "prefix-folder": ([*TRANSLATE, "--prefix", "{root}"], "error: --prefix file .* is a folder: give a file"),
    "not-utf8": (
        [*TRANSLATE, "--input", "{root}/latin1.txt", "--output", "{root}/out.txt"],
        "latin1.txt is not UTF-8 text",
    ),
    "output-folder": ([*TRANSLATE, "--output", "{root}/no/such/out.txt"], "cannot write .*: no such folder"),
    "beams": ([*TRANSLATE, "--num_beams", "0"], "argument --num_beams: must be at least 1"),
    "device": ([*TRANSLATE, "--device", "toaster"], "unknown device 'toaster'"),
    "abbreviation": (["translate", "--mod", "{model}"], "the following arguments are required: --model"),
    "unknown-option": ([*TRANSLATE, "--beams", "4"], "unrecognized arguments: --beams"),
    "no-command": ([], "the following arguments are required: COMMAND"),
    "prune-nothing": (PRUNE, "give either --every_other"),
    "prune-both": ([*PRUNE, "--every_other", "0.5", "--encoder_layers_to_keep", "0"], "give either --every_other"),
    "prune-range": (
        [*PRUNE, "--encoder_layers_to_keep", "0,7"],
        r"encoder_layers_to_keep=\[0, 7\] has indices \[7\] outside",
    ),
    "prune-list": ([*PRUNE, "--decoder_layers_to_keep", "a,b"], "expected layer indices like 0,2,4"),
    "prune-rate": ([*PRUNE, "--every_other", "1.5"], r"the LayerDrop rate must be in \(0, 1\)"),
    "prune-stacks": (
        [*PRUNE, "--encoder_layers_to_keep", "0", "--stacks", "encoder"],
        "--stacks goes with --every_other",
    ),
    "prune-in-place": (
        ["prune", "--model", "{model}", "--output_dir", "{model}", "--every_other", "0.5"],
        "--output_dir must be a new folder",
    ),  # fmt: skip
    "prune-vocab-size": (
        [*PRUNE, "--vocab_size", "100000"],
        "--vocab_size: vocab_size 100000 must be smaller than the vocabulary",
    ),
    "prune-vocab-number": ([*PRUNE, "--vocab_size", "4k"], "argument --vocab_size: expected a whole number, got '4k'"),
    "prune-missing": (
        ["prune", "--model", "{root}/nowhere", "--output_dir", "{root}/p", "--every_other", "0.5"],
        "no such model folder",
    ),  # fmt: skip
    "card-missing": (["card", "--model", "{root}/nowhere"], "error: no such model folder"),
    "card-not-a-model": (["card", "--model", "{root}/empty"], r"is not a model folder \(no config.json\)"),
    "push-repo-id": (["push", "--model", "{model}", "--hub_model_id", "my repo"], "'my repo' is not a valid repo id"),
    "average-missing": (
        ["average", "--run_dir", "{root}/nowhere", "--last", "2", "--output_dir", "{root}/a"],
        "error: no such model folder",
    ),  # fmt: skip
}


@pytest.mark.parametrize(("argv", "message"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_a_clear_error(model_folder, broken_folders, capsys, argv, message):
    argv = [argument.format(model=model_folder, root=broken_folders) for argument in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    assert re.search(message, err), err
    assert not (broken_folders / "p").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error(model_folder, capsys):
    assert main(["translate", "--model", str(model_folder), "--device", "cuda"]) == 2
    assert (
        "error: device 'cuda' was requested but no CUDA GPU is available: use --device cpu" in capsys.readouterr().err
    )


@pytest.mark.slow
def test_errors_from_a_real_process_have_no_traceback(tmp_path):
    command = [sys.executable, "-m", "vaswani.cli", "push", "--model", str(tmp_path), "--hub_model_id", "a/b/c"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("error: 'a/b/c' is not a valid repo id") and "Traceback" not in result.stderr


def test_translate_never_writes_over_a_file_of_the_model_and_errors_start_their_own_line(
    model_folder, tmp_path, capsys
):
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n", encoding="utf-8")
    weights = model_folder / "model.safetensors"
    before = weights.read_bytes()
    assert main(["translate", "--model", str(model_folder), "--input", str(source), "--output", str(weights)]) == 2
    assert "is a file of the model folder" in capsys.readouterr().err
    assert weights.read_bytes() == before
    # a decoding error after the progress bar started: the bar is closed first, so `error:` begins a line
    source.write_bytes(b"one\ntw\xe9\n")
    assert (
        main(["translate", "--model", str(model_folder), "--input", str(source), "--output", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err
    assert any(line.startswith("error: ") and "line 2" in line for line in err.splitlines()), err
    assert not (tmp_path / "o").exists()
