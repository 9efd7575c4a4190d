"""Decoding for production (issue 29): target prefixes, scoring given translations, ensembles; both backends where
they apply. References: a greedy loop written here over the model's own full forward with the decoder input forced
by hand (prefixes), `generate(decoder_input_ids=...)` (CTranslate2's `target_prefix`), the model's teacher-forced
forward (scores), the members' own forward passes (ensembles)."""

import contextlib
import json
import shutil

import pytest
import torch
from conftest import tiny_model
from test_pipeline_vaswani import (  # noqa: F401  (one_torch_thread is an autouse fixture)
    one_torch_thread,
    tiny_tokenizer,
    trained_model_and_tokenizer,
)

from tokenization import train_bpe_tokenizer
from vaswani.cli import main
from vaswani.errors import TranslateError
from vaswani.inference.search import WORD_START, EnsembleStep, split_prefix
from vaswani.inference.translator import Translator

SOURCES = ["the cat sat on the mat", "a dog runs in the park", "the weather is nice today", "we read a book at home"]
TARGETS = [
    "die Katze sitzt auf der Matte",
    "ein Hund läuft im Park",
    "das Wetter ist heute schön",
    "wir lesen ein Buch",
]


@pytest.fixture(scope="module")
def translator(model_folder):
    return Translator(model_folder, device="cpu")


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_cli(*argv) -> int:
    return main([*argv])


# ---------------------------------------------------------------------------------------------------------------
# Target prefixes
# ---------------------------------------------------------------------------------------------------------------
# Two computation orders of one float32 model (the search's cached steps, one full forward of the whole decoder input)
# agree within a few 1e-6 in log-probability here (measured on Zen 4 and Sapphire Rapids); two tokens closer than
# this are a tie either order may break its own way, whatever the CPU. The greedy tests below hold on any CPU: a token
# more than this below its step's best fails them, a tie cannot.
TIE = 1e-4


class HandForcedPrefix:
    """The prefix forced by hand: the decoder input starts with the prefix's subwords up to its last word
    (`decoder`); the next tokens must spell that word on (any subword whose text continues it); then anything."""

    def __init__(self, model, tokenizer, prefix: str):
        ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
        pieces = tokenizer.convert_ids_to_tokens(ids)
        last = max(i for i, piece in enumerate(pieces) if piece.startswith(WORD_START))
        self.decoder = [model.config.decoder_start_token_id, *ids[:last]]
        self.remaining = "".join(pieces[last:])
        self.vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.special = set(tokenizer.all_special_ids)

    def mask(self, log_probs: torch.Tensor) -> torch.Tensor:
        """log_probs (V,) with -inf for every token that does not continue the word still to spell."""
        log_probs = log_probs.clone()
        if self.remaining:
            for token, piece in enumerate(self.vocab):
                if token in self.special or not (self.remaining.startswith(piece) or piece.startswith(self.remaining)):
                    log_probs[token] = float("-inf")
        return log_probs

    def advance(self, token: int) -> None:
        piece, remaining = self.vocab[token], self.remaining
        self.remaining = remaining[len(piece) :] if remaining and remaining.startswith(piece) else ""


def greedy_with_prefix(model, tokenizer, source: str, prefix: str, cap: int = 60) -> tuple[list[int], float]:
    """Greedy decoding with the prefix forced by hand (`HandForcedPrefix`), every step one full forward of the
    decoder input so far (no cache). Returns the output ids (the start token and the forced ones included, EOS
    excluded) and the smallest margin between a step's best and second-best log-probabilities."""
    forced = HandForcedPrefix(model, tokenizer, prefix)
    decoder, margin = list(forced.decoder), float("inf")
    source_ids = tokenizer([source], return_tensors="pt")
    while len(decoder) <= cap:
        with torch.no_grad():
            logits = model(**source_ids, decoder_input_ids=torch.tensor([decoder])).logits[0, -1]
        top = forced.mask(torch.log_softmax(logits, -1)).topk(2).values
        margin = min(margin, float(top[0] - top[1]))
        token = int(forced.mask(logits).argmax())
        if token == tokenizer.eos_token_id:
            break
        decoder.append(token)
        forced.advance(token)
    return decoder, margin


def greedy_shortfalls(model, tokenizer, source: str, prefix: str, output: list[int]) -> list[float]:
    """A search's output ids (the start token first, EOS last) fed through one full forward: for each step after the
    forced tokens, how far the chosen token's log-probability is below the best one the prefix allows (0 where it is
    the best). The forced tokens themselves must be the output's first ones."""
    forced = HandForcedPrefix(model, tokenizer, prefix)
    assert output[: len(forced.decoder)] == forced.decoder
    with torch.no_grad():
        batch = tokenizer([source], return_tensors="pt")
        log_probs = torch.log_softmax(model(**batch, decoder_input_ids=torch.tensor([output[:-1]])).logits[0], -1)
    shortfalls = []
    for position in range(len(forced.decoder) - 1, len(output) - 1):  # log_probs[position] scores output[position + 1]
        allowed = forced.mask(log_probs[position])
        shortfalls.append(float(allowed.max() - allowed[output[position + 1]]))
        forced.advance(output[position + 1])
    return shortfalls


@pytest.mark.parametrize("prefix", ["ein Hu", "ein Hund ", "die Katze sitzt im", "w"])
def test_greedy_prefix_decoding_is_the_hand_forced_greedy_loop(translator, prefix):
    """Prefixes the model would not choose for "the cat sat on the mat": inside a word, ending in a space, whole
    words, one letter; the output starts with the prefix and continues it greedily: every token it chose is its
    step's best under one full forward (within `TIE`), so it is the hand-forced loop's output wherever that loop met
    no tie. (An EOS that is not the best token must not end it: one beam is greedy, as in `generate()`.)"""
    model, tokenizer = trained_model_and_tokenizer()
    source_ids = tokenizer(SOURCES[0])["input_ids"]
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    (hypothesis,) = translator.engine.generate([source_ids], num_beams=1, prefixes=[prefix_ids])[0]
    output = [model.config.decoder_start_token_id, *hypothesis.ids, tokenizer.eos_token_id]
    shortfalls = greedy_shortfalls(model, tokenizer, SOURCES[0], prefix, output)
    assert max(shortfalls) <= TIE, shortfalls
    text = translator.translate([SOURCES[0]], num_beams=1, prefixes=[prefix])[0]
    assert text == tokenizer.decode(hypothesis.ids, skip_special_tokens=True) and text.startswith(prefix)
    expected, margin = greedy_with_prefix(model, tokenizer, SOURCES[0], prefix)
    if margin > TIE:  # no tie on the loop's way: the one greedy output
        assert output[:-1] == expected


def test_a_prefix_is_never_continued_by_a_filler_token(tmp_path):
    """The unused tokens that pad a trained vocabulary ("<madeupword0000>", ...) are special: healing a partial word
    that could start one ("<ma") must not pick it, or the decoded output (which drops special tokens) would lose the
    prefix. A random model, whose logits favour no token, over 8 beams and 8 hypotheses."""
    markup = ["<b>the cat</b> sat on <i>the mat</i>", "a <em>dog</em> runs <b>in</b> the park", "<p>mad made</p>"]
    tokenizer = train_bpe_tokenizer(iterator=markup * 3, vocab_size=301, min_frequency=1)
    fillers = [i for i, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
               if token.startswith("<madeupword")]  # fmt: skip
    assert len(fillers) >= 3 and "<" in tokenizer.get_vocab()  # "<ma" can be healed by a filler or by "<" "ma..."
    save_random_model(tmp_path / "model", 5, tokenizer=tokenizer)
    translator = Translator(tmp_path / "model", device="cpu")
    source_ids = tokenizer(markup[0])["input_ids"]
    prefix_ids = tokenizer("a <ma", add_special_tokens=False)["input_ids"]
    hypotheses = translator.engine.generate([source_ids], num_beams=8, num_hypotheses=8, max_new_tokens=6,
                                            prefixes=[prefix_ids])[0]  # fmt: skip
    assert len(hypotheses) == 8 and not {t for h in hypotheses for t in h.ids} & set(fillers)
    texts = translator.translate_hypotheses([markup[0]], num_beams=8, nbest=8, max_new_tokens=6, prefixes=["a <ma"])
    assert all(h.text.startswith("a <ma") for h in texts[0])


def test_a_prefix_inside_a_word_is_continued_by_the_whole_word(translator):
    """ "ein Hu" is tokenized "▁ein ▁ H u"; the model knows the word as "▁ Hun d": the healed last word lets the
    output use the model's own split, and the result reads "ein Hund ..." (not "ein Hu" + a new word)."""
    _, tokenizer = trained_model_and_tokenizer()
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    forced, partial = split_prefix(tokenizer("ein Hu", add_special_tokens=False)["input_ids"], vocab)
    assert tokenizer.convert_ids_to_tokens(forced) == ["▁ein"] and partial == "▁Hu"
    (output,) = translator.translate([SOURCES[1]], num_beams=4, prefixes=["ein Hu"])
    assert output.startswith("ein Hund")


def test_beam_prefix_decoding_keeps_nbest_scores_and_alignments(translator, monkeypatch):
    prefixes = ["ein Hu", "", "das Wetter ist ", None]
    tokens = {}  # (text, score) -> the token ids the engine decoded: what the translation was made of
    generate = translator.engine.generate

    def recording_generate(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        for hypothesis in (h for hypotheses in outputs for h in hypotheses):
            text = translator.tokenizer.decode(hypothesis.ids, skip_special_tokens=True)
            tokens[text, hypothesis.score] = [t for t in hypothesis.ids if t != translator.tokenizer.eos_token_id]
        return outputs

    monkeypatch.setattr(translator.engine, "generate", recording_generate)
    results = translator.translate_hypotheses(SOURCES, num_beams=4, nbest=3, scores=True, alignment=True,
                                              prefixes=prefixes)  # fmt: skip
    monkeypatch.undo()
    plain = translator.translate_hypotheses(SOURCES, num_beams=4, nbest=3, scores=True)
    canonical = 0
    for source, prefix, hypotheses, reference in zip(SOURCES, prefixes, results, plain, strict=True):
        assert len(hypotheses) == 3
        assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
        assert all(h.text.startswith(prefix or "") and h.alignment for h in hypotheses)
        if not prefix:  # no prefix: the same hypotheses as generate() gives
            assert [h.text for h in hypotheses][:1] == [h.text for h in reference][:1]
        # the score of the whole output, prefix included: what `score` gives for it, wherever the hypothesis's
        # tokens are its text's own segmentation (a beam may spell a word in other pieces, which `score` cannot see)
        rescored = translator.score([source] * 3, [h.text for h in hypotheses])
        for hypothesis, score in zip(hypotheses, rescored, strict=True):
            if translator.tokenizer(hypothesis.text)["input_ids"][:-1] == tokens[hypothesis.text, hypothesis.score]:
                canonical += 1
                assert hypothesis.score == pytest.approx(score.score, abs=1e-5)
    assert canonical >= 9, canonical  # of 12: the comparison covers most hypotheses


def test_prefix_file_and_jsonl_field_give_the_same_translations(model_folder, translator, tmp_path):
    sources = [SOURCES[0], "", SOURCES[1]]
    prefixes = ["ein Hu", "", ""]
    source = write_lines(tmp_path / "in.txt", sources)
    prefix = write_lines(tmp_path / "prefix.txt", prefixes)
    records = [{"text": text, **({"prefix": p} if p else {})} for text, p in zip(sources, prefixes, strict=True)]
    jsonl = write_lines(tmp_path / "in.jsonl", [json.dumps(record) for record in records])
    common = ["translate", "--model", str(model_folder), "--no_progress", "--scores"]
    assert run_cli(*common, "--input", str(source), "--prefix", str(prefix), "--output", str(tmp_path / "a")) == 0
    assert run_cli(*common, "--input", str(jsonl), "--input_format", "jsonl", "--output", str(tmp_path / "b")) == 0
    lines = (tmp_path / "a").read_text().splitlines()
    assert lines == (tmp_path / "b").read_text().splitlines()
    expected = translator.translate_hypotheses(sources, scores=True, prefixes=prefixes)
    assert [line.split(" ||| ")[1] for line in lines] == [h[0].text if h else "" for h in expected]
    assert lines[0].split(" ||| ")[1].startswith("ein Hu")


@pytest.mark.parametrize(
    "case, message",
    [
        ("fewer", "the prefixes end after line 1"),
        ("more", "more lines of prefixes than the 2 input lines"),
        ("too_long", "does not fit max_new_tokens=3"),
        ("jsonl_and_file", "do not go together"),
        ("bad_json", 'has no "text" string'),
        ("unknown_field", "unknown field(s) 'prefx'"),
        ("pair", 'line 1 is a sentence pair ({"translation": ...}, as --train_file and --test_file hold them)'),
    ],
)
def test_bad_prefix_input_is_a_one_line_error_and_writes_nothing(model_folder, tmp_path, capsys, case, message):
    source = write_lines(tmp_path / "in.txt", SOURCES[:2])
    prefix = {"fewer": ["ein"], "more": ["ein", "", "das"], "too_long": ["die Katze sitzt auf", ""], "jsonl_and_file": [""] * 2,
              "bad_json": [], "unknown_field": [], "pair": []}[case]  # fmt: skip
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(tmp_path / "out.txt"),
            "--no_progress", "--max_new_tokens", "3" if case == "too_long" else "40"]  # fmt: skip
    if case in ("bad_json", "unknown_field", "pair"):
        line = {"bad_json": '["a list"]', "unknown_field": '{"text": "a dog", "prefx": "ein"}',
                "pair": '{"translation": {"en": "a dog", "de": "ein Hund"}}'}[case]  # fmt: skip
        write_lines(source, [line])
        argv += ["--input_format", "jsonl"]
    else:
        argv += ["--prefix", str(write_lines(tmp_path / "prefix.txt", prefix))]
        if case == "jsonl_and_file":
            argv += ["--input_format", "jsonl"]
    capsys.readouterr()
    assert run_cli(*argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out.txt").exists()


# ---------------------------------------------------------------------------------------------------------------
# Scoring given translations
# ---------------------------------------------------------------------------------------------------------------
def teacher_forced_log_probs(model, tokenizer, source: str, target: str) -> list[float]:
    batch = tokenizer([source], text_target=[target], return_tensors="pt")
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).logits
    return torch.log_softmax(logits[0], -1).gather(-1, batch["labels"][0][:, None]).squeeze(-1).tolist()


def test_scores_are_the_models_teacher_forced_log_probabilities(translator):
    model, tokenizer = trained_model_and_tokenizer()
    targets = [TARGETS[0], TARGETS[2], "ein Hund", ""]  # a right one, a wrong one, a short one, an empty one
    results = translator.score(SOURCES, targets, length_penalty=0.6)
    for source, target, result in zip(SOURCES, targets, results, strict=True):
        expected = teacher_forced_log_probs(model, tokenizer, source, target)
        assert result.token_log_probs == pytest.approx(expected, abs=1e-5)
        assert result.tokens[-1] == tokenizer.eos_token and len(result.tokens) == len(expected)
        assert result.log_prob == pytest.approx(sum(expected), abs=1e-5)
        assert result.score == pytest.approx(sum(expected) / len(expected) ** 0.6, abs=1e-5)
    assert results[0].score > results[1].score  # the right translation scores better


@pytest.mark.parametrize("paper", [False, True])
def test_score_command_gives_the_scores_translate_prints(model_folder, tmp_path, paper):
    source = write_lines(tmp_path / "in.txt", SOURCES)
    options = ["--paper_decoding"] if paper else []
    translated = tmp_path / "translated.txt"
    assert run_cli("translate", "--model", str(model_folder), "--input", str(source), "--output", str(translated),
                   "--no_progress", "--scores", *options) == 0  # fmt: skip
    fields = [line.split(" ||| ") for line in translated.read_text().splitlines()]
    target = write_lines(tmp_path / "target.txt", [text for _, text, _ in fields])
    scored = tmp_path / "scores.txt"
    assert run_cli("score", "--model", str(model_folder), "--source", str(source), "--target", str(target),
                   "--output", str(scored), "--no_progress", *options) == 0  # fmt: skip
    lines = [line.split(" ||| ") for line in scored.read_text().splitlines()]
    assert [float(score) for score, _, _ in lines] == pytest.approx([float(s) for *_, s in fields], abs=2e-6)
    for _, total, per_token in lines:  # the sum is the sum of the per-token values
        assert float(total) == pytest.approx(sum(map(float, per_token.split())), abs=1e-5)
    jsonl = tmp_path / "scores.jsonl"
    assert run_cli("score", "--model", str(model_folder), "--source", str(source), "--target", str(target),
                   "--output", str(jsonl), "--output_format", "jsonl", "--no_progress", *options) == 0  # fmt: skip
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(len(SOURCES)))
    assert [r["score"] for r in records] == pytest.approx([float(score) for score, _, _ in lines], abs=1e-6)
    assert all(len(r["tokens"]) == len(r["token_log_probs"]) for r in records)


def test_score_refuses_files_of_different_lengths(model_folder, tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", SOURCES)
    target = write_lines(tmp_path / "target.txt", TARGETS[:3])
    output = tmp_path / "scores.txt"
    assert run_cli("score", "--model", str(model_folder), "--source", str(source), "--target", str(target),
                   "--output", str(output)) == 2  # fmt: skip
    assert "has 4 lines but --target" in capsys.readouterr().err
    assert not output.exists()
    assert run_cli("score", "--model", str(model_folder), "--source", str(tmp_path / "nope"), "--target",
                   str(target)) == 2  # fmt: skip
    assert "no such --source file" in capsys.readouterr().err
    assert run_cli("score", "--model", str(model_folder), "--source", str(source), "--target", str(tmp_path)) == 2
    assert f"--target file {tmp_path} is a folder: give a file" in capsys.readouterr().err


PAIRS_FILE_FORMATS = ["jsonl", "tsv", "prefix"]


def write_pairs_file(folder, kind, pairs, source_lang="en", target_lang="de"):
    """`pairs` in a format of train's data files; returns what --pairs_file takes (a file, or the prefix)."""
    if kind == "jsonl":
        return write_lines(folder / "pairs.jsonl", [json.dumps({"translation": {source_lang: s, target_lang: t}},
                                                               ensure_ascii=False) for s, t in pairs])  # fmt: skip
    if kind == "tsv":
        return write_lines(folder / "pairs.tsv", [f"{s}\t{t}" for s, t in pairs])
    write_lines(folder / f"pairs.{source_lang}", [s for s, _ in pairs])
    write_lines(folder / f"pairs.{target_lang}", [t for _, t in pairs])
    return folder / "pairs"


@pytest.mark.parametrize("kind", PAIRS_FILE_FORMATS)
def test_score_pairs_file_scores_every_pair_as_source_and_target_files_do(model_folder, tmp_path, kind):
    """One file of pairs gives, line for line, what --source and --target give (the path the tests above check against
    the model's teacher-forced log-probabilities), the empty pair included so that output line i is input pair i."""
    pairs = [(SOURCES[0], TARGETS[0]), (SOURCES[1], TARGETS[2]), ("", ""), (SOURCES[3], TARGETS[3])]
    source = write_lines(tmp_path / "in.en", [s for s, _ in pairs])
    target = write_lines(tmp_path / "in.de", [t for _, t in pairs])
    pairs_file = write_pairs_file(tmp_path, kind, pairs)
    for output_format in ("text", "jsonl"):
        expected, scored = tmp_path / f"expected.{output_format}", tmp_path / f"scored.{output_format}"
        assert run_cli("score", "--model", str(model_folder), "--source", str(source), "--target", str(target),
                       "--output", str(expected), "--output_format", output_format, "--no_progress") == 0  # fmt: skip
        assert run_cli("score", "--model", str(model_folder), "--pairs_file", str(pairs_file), "--source_lang", "en",
                       "--target_lang", "de", "--output", str(scored), "--output_format", output_format,
                       "--no_progress") == 0  # fmt: skip
        assert scored.read_text().splitlines() == expected.read_text().splitlines()
    records = [json.loads(line) for line in scored.read_text().splitlines()]
    assert [r["line"] for r in records] == [0, 1, 2, 3]
    assert records[0]["score"] > records[1]["score"]  # the right translation above the wrong one


@pytest.mark.parametrize("kind", PAIRS_FILE_FORMATS)
@pytest.mark.parametrize("pairs", [[("", "")], [("", "die Katze"), (" ", "")], []], ids=["one", "two", "none"])
def test_score_pairs_file_without_a_pair_of_text_scores_as_source_and_target_files_do(model_folder, tmp_path, kind,
                                                                                      pairs):  # fmt: skip
    """Pairs of which none has text on both sides, or none at all: a line of scores for each, as --source and
    --target give (evaluate and training refuse such a file: they need a pair to translate or learn)."""
    source = write_lines(tmp_path / "in.en", [s for s, _ in pairs])
    target = write_lines(tmp_path / "in.de", [t for _, t in pairs])
    pairs_file = write_pairs_file(tmp_path, kind, pairs)
    expected, scored = tmp_path / "expected.jsonl", tmp_path / "scored.jsonl"
    assert run_cli("score", "--model", str(model_folder), "--source", str(source), "--target", str(target),
                   "--output", str(expected), "--output_format", "jsonl", "--no_progress") == 0  # fmt: skip
    assert run_cli("score", "--model", str(model_folder), "--pairs_file", str(pairs_file), "--source_lang", "en",
                   "--target_lang", "de", "--output", str(scored), "--output_format", "jsonl",
                   "--no_progress") == 0  # fmt: skip
    assert len(scored.read_text().splitlines()) == len(pairs)
    assert scored.read_text() == expected.read_text()


def test_score_pairs_file_takes_the_models_languages_from_its_run_args(model_folder, tmp_path):
    """Without --source_lang and --target_lang, the pair of the model's run_args.json names the file's sides (as
    `vaswani evaluate` reads its --test_file); a model without one needs them given."""
    model = tmp_path / "model"
    shutil.copytree(model_folder, model)
    pairs_file = write_pairs_file(tmp_path, "jsonl", list(zip(SOURCES, TARGETS, strict=True)), "en", "fr")
    expected, scored = tmp_path / "expected.txt", tmp_path / "scored.txt"
    assert run_cli("score", "--model", str(model), "--pairs_file", str(pairs_file), "--source_lang", "en",
                   "--target_lang", "fr", "--output", str(expected), "--no_progress") == 0  # fmt: skip
    assert run_cli("score", "--model", str(model), "--pairs_file", str(pairs_file), "--output", str(scored)) == 2
    assert not scored.exists()
    (model / "run_args.json").write_text(json.dumps({"source_lang": "en", "target_lang": "fr"}))
    assert run_cli("score", "--model", str(model), "--pairs_file", str(pairs_file), "--output", str(scored),
                   "--no_progress") == 0  # fmt: skip
    assert scored.read_text() == expected.read_text()


# What each refusal of --pairs_file says (after "error: "), by case of the test below.
PAIRS_FILE_REFUSALS = {
    "both": "--source and --pairs_file both give pairs: give --pairs_file alone, or --source and --target",
    "neither": "--source FILE is missing: give --source FILE and --target FILE, or the pairs in one --pairs_file PATH",
    "source_lang with text files": "--source_lang en names a side of --pairs_file: leave it out with --source and "
    "--target",
    "no languages": "has no run_args.json; give the languages of --pairs_file: --source_lang LANG --target_lang LANG",
    "one language": "--source_lang needs --target_lang beside it: give both languages of --pairs_file, or neither "
    "to take the model's",
    "not a language code": "--target_lang 'd e' is not a language code",
    "missing side": 'pairs.jsonl line 2: "translation" has no "de" key',
    "lone surrogate": 'pairs.jsonl line 3: the "en" text holds a lone surrogate \\ud800 at character 5',
    "no such file": "--pairs_file: file not found",
    "output is the input": "pairs.jsonl: writing it would destroy the input; give another file",
}


@pytest.mark.parametrize("case", PAIRS_FILE_REFUSALS)
def test_score_pairs_file_refusals_name_the_problem_and_write_nothing(model_folder, tmp_path, capsys, case):
    lines = ['{"translation": {"en": "the cat", "de": "die Katze"}}'] * 3
    if case == "missing side":
        lines[1] = '{"translation": {"en": "the cat", "fr": "le chat"}}'
    if case == "lone surrogate":
        lines[2] = '{"translation": {"en": "the \\ud800cat", "de": "die Katze"}}'
    pairs_file = write_lines(tmp_path / "pairs.jsonl", lines)
    text = write_lines(tmp_path / "text.txt", ["the cat"] * 3)
    output = tmp_path / "scores.txt"
    languages = ["--source_lang", "en", "--target_lang", "de"]
    argv = {
        "both": ["--pairs_file", str(pairs_file), "--source", str(text), *languages],
        "neither": [],
        "source_lang with text files": ["--source", str(text), "--target", str(text), "--source_lang", "en"],
        "no languages": ["--pairs_file", str(pairs_file)],
        "one language": ["--pairs_file", str(pairs_file), "--source_lang", "en"],
        "not a language code": ["--pairs_file", str(pairs_file), "--source_lang", "en", "--target_lang", "d e"],
        "missing side": ["--pairs_file", str(pairs_file), *languages],
        "lone surrogate": ["--pairs_file", str(pairs_file), *languages],
        "no such file": ["--pairs_file", str(tmp_path / "nope.jsonl"), *languages],
        "output is the input": ["--pairs_file", str(pairs_file), *languages],
    }[case]
    if case == "output is the input":
        output = pairs_file
    before = pairs_file.read_bytes()
    assert run_cli("score", "--model", str(model_folder), *argv, "--output", str(output), "--no_progress") == 2
    err = capsys.readouterr().err
    assert PAIRS_FILE_REFUSALS[case] in err and err.startswith("error: ") and "Traceback" not in err, err
    assert pairs_file.read_bytes() == before
    assert case == "output is the input" or not output.exists()


# a lone surrogate: JSON's escape of half a pair, or the three bytes Python's surrogatepass writes for one (no UTF-8)
LONE_SURROGATE_JSON = '{"text": "the cat \\ud800"}'
LONE_SURROGATE_BYTES = "the cat \ud800".encode("utf-8", "surrogatepass")


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("translate_jsonl", 'in.txt line 2: "text" holds a lone surrogate \\ud800 at character 9'),
        ("translate_text", "in.txt is not UTF-8 text: line 2 has the byte 0xed at position 9"),
        ("score", "target.txt is not UTF-8 text: line 2 has the byte 0xed at position 9"),
    ],
)
def test_a_lone_surrogate_in_the_input_is_a_one_line_error_naming_the_line(model_folder, tmp_path, capsys, command,
                                                                           problem):  # fmt: skip
    """Issue 42's rule for the command line, as for the server: no traceback, exit 2, nothing written."""
    output = tmp_path / "out.txt"
    source = tmp_path / "in.txt"
    if command == "translate_jsonl":
        source.write_text('{"text": "a dog"}\n' + LONE_SURROGATE_JSON + "\n", encoding="ascii")
        argv = ["translate", "--input", str(source), "--input_format", "jsonl"]
    elif command == "translate_text":
        source.write_bytes(b"a dog\n" + LONE_SURROGATE_BYTES + b"\n")
        argv = ["translate", "--input", str(source)]
    else:
        write_lines(source, SOURCES[:2])
        (tmp_path / "target.txt").write_bytes(b"ein Hund\n" + LONE_SURROGATE_BYTES + b"\n")
        argv = ["score", "--source", str(source), "--target", str(tmp_path / "target.txt")]
    capsys.readouterr()
    assert run_cli(*argv, "--model", str(model_folder), "--output", str(output), "--no_progress") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and problem in err[0], err
    assert not output.exists()


UTF8_BOM = "\ufeff".encode()


@pytest.mark.parametrize("command", ["translate_text", "translate_jsonl", "translate_prefix", "score"])
def test_a_byte_order_mark_at_the_start_of_a_file_is_not_read_as_text(model_folder, tmp_path, command):
    """Notepad and PowerShell start a UTF-8 file with a byte-order mark: every file of `vaswani translate` and
    `vaswani score` gives what the same file without it gives (the mark would be three bytes of the first sentence,
    prefix or target, or make the first JSON line invalid)."""

    def run(bom: bytes) -> str:
        folder = tmp_path / ("bom" if bom else "plain")
        folder.mkdir()
        source, output = folder / "in.txt", folder / "out.txt"
        source.write_bytes(
            (bom if command != "translate_prefix" else b"")
            + "".join(
                (json.dumps({"text": s}) if command == "translate_jsonl" else s) + "\n" for s in SOURCES[:2]
            ).encode()
        )
        argv = ["translate", "--input", str(source), "--scores"]
        if command == "translate_jsonl":
            argv += ["--input_format", "jsonl"]
        elif command == "translate_prefix":
            (folder / "prefix.txt").write_bytes(bom + b"die\nein\n")
            argv += ["--prefix", str(folder / "prefix.txt")]
        elif command == "score":
            (folder / "target.txt").write_bytes(bom + "".join(t + "\n" for t in TARGETS[:2]).encode())
            argv = ["score", "--source", str(source), "--target", str(folder / "target.txt")]
        assert run_cli(*argv, "--model", str(model_folder), "--output", str(output), "--no_progress") == 0
        return output.read_text(encoding="utf-8")

    assert run(UTF8_BOM) == run(b"")


@pytest.mark.parametrize("command", ["translate", "score"])
def test_a_utf16_file_is_named_as_such_in_the_error(model_folder, tmp_path, capsys, command):
    """What Windows PowerShell 5's `>` writes: UTF-16 with its byte-order mark. The error says so and how to convert."""
    source = tmp_path / "in.txt"
    source.write_text("a dog\n", encoding="utf-16")  # Python's UTF-16 starts with the byte-order mark
    argv = ["translate", "--input", str(source)]
    if command == "score":
        argv = ["score", "--source", str(write_lines(tmp_path / "src.txt", ["a dog"])), "--target", str(source)]
    capsys.readouterr()
    assert run_cli(*argv, "--model", str(model_folder), "--no_progress") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{source} is not UTF-8 text: line 1" in err[0], err
    assert "UTF-16 byte-order mark" in err[0] and "iconv -f utf-16 -t utf-8" in err[0], err


def test_a_target_longer_than_the_position_table_is_an_error_naming_its_line(tmp_path, capsys):
    save_random_model(tmp_path / "m", 1, position_embedding_type="learned", max_position_embeddings=12)
    source = write_lines(tmp_path / "in.txt", SOURCES[:3])
    target = write_lines(tmp_path / "target.txt", ["ein Hund", "die Katze sitzt auf der Matte", "das"])
    output = tmp_path / "scores.txt"
    assert run_cli("score", "--model", str(tmp_path / "m"), "--source", str(source), "--target", str(target),
                   "--output", str(output), "--buffer_lines", "1", "--no_progress") == 2  # fmt: skip
    assert "error: target 2 has 20 tokens (EOS included) and does not fit the model's 11 decoder positions" in (
        capsys.readouterr().err
    )
    assert not output.exists()


# ---------------------------------------------------------------------------------------------------------------
# CTranslate2: prefixes and scores
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(model_folder, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from vaswani.export.ctranslate2 import export_ctranslate2

    root = tmp_path_factory.mktemp("ct2")
    return {q: export_ctranslate2(model_folder, root / q, quantization=q) for q in ("float32", "int8")}


def test_ctranslate2_prefix_is_generate_with_the_prefix_forced_as_decoder_input(exported, model_folder):
    """CTranslate2's `target_prefix` forces the prefix's own subwords: the reference is `generate()` with the
    decoder input [start] + the prefix's ids, greedy and beam 4."""
    model, tokenizer = trained_model_and_tokenizer()
    ct2 = Translator(exported["float32"], device="cpu")
    # prefixes of a user correcting the start (the documented beam-search differences of the two engines aside,
    # a prefix the model finds absurd can end differently: CTranslate2 counts the prefix in its minimum length)
    for num_beams, prefixes in ((1, ["ein Hund", "das", "wir lesen ein", "die Katze sitzt"]),
                                (4, ["die Katze", "ein Hund läuft", "das", "wir lesen ein"])):  # fmt: skip
        outputs = ct2.translate(SOURCES, num_beams=num_beams, prefixes=prefixes)
        for source, prefix, output in zip(SOURCES, prefixes, outputs, strict=True):
            ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
            decoder_input_ids = torch.tensor([[model.config.decoder_start_token_id, *ids]])
            reference = model.generate(**tokenizer([source], return_tensors="pt"), decoder_input_ids=decoder_input_ids,
                                       num_beams=num_beams, early_stopping=True)  # fmt: skip
            assert output == tokenizer.decode(reference[0], skip_special_tokens=True)
            assert output.startswith(prefix)
    # --scores with a prefix: the whole output's score (CTranslate2 leaves the prefix out; score_batch puts it in)
    hypotheses = ct2.translate_hypotheses(SOURCES, scores=True, prefixes=prefixes)
    texts = [h[0].text for h in hypotheses]
    expected = [r.score for r in Translator(model_folder, device="cpu").score(SOURCES, texts)]
    assert [h[0].score for h in hypotheses] == pytest.approx(expected, abs=1e-4)


def test_ctranslate2_scores_equal_pytorch_within_float_tolerance(exported, translator):
    targets = [TARGETS[0], TARGETS[2], "ein Hund", ""]
    reference = translator.score(SOURCES, targets)
    float32 = Translator(exported["float32"], device="cpu").score(SOURCES, targets)
    int8 = Translator(exported["int8"], device="cpu").score(SOURCES, targets)
    for ours, theirs, quantized in zip(reference, float32, int8, strict=True):
        assert theirs.tokens == ours.tokens
        assert theirs.token_log_probs == pytest.approx(ours.token_log_probs, abs=1e-4)
        assert theirs.score == pytest.approx(ours.score, abs=1e-4)
        # int8 weights: the stated bound of docs/translation.md, 0.1 per token on average
        assert abs(quantized.log_prob - ours.log_prob) <= 0.1 * len(ours.tokens)


# ---------------------------------------------------------------------------------------------------------------
# Ensembles
# ---------------------------------------------------------------------------------------------------------------
def save_random_model(folder, seed: int, tokenizer=None, **overrides):
    """An untrained tiny model (seed `seed`) with the test tokenizer: its outputs differ from another seed's."""
    tokenizer = tokenizer or tiny_tokenizer()
    model = tiny_model(seed=seed, vocab_size=len(tokenizer), d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
                       pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
                       **overrides).eval()  # fmt: skip
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def test_our_beam_search_normalizes_each_fixnorm_members_output_rows_once_with_the_same_outputs(tmp_path,
                                                                                                 monkeypatch):  # fmt: skip
    """The search that ensembles, prefixes and constraints run on (not `generate()`) normalises each FixNorm member's
    (V, d) output matrix once per batch, not at every step, with exactly the outputs and scores of normalising at
    every step."""
    from test_modeling_vaswani_options import normalizations_of

    from modeling_vaswani.modeling_vaswani import FixNormLinear

    fixnorm = {"fixnorm": True, "norm_type": "scalenorm", "norm_position": "pre"}
    members = [save_random_model(tmp_path / name, seed, **fixnorm) for name, seed in (("a", 3), ("b", 4))]
    ensemble = Translator([tmp_path / "a", tmp_path / "b"], device="cpu")
    calls = normalizations_of(monkeypatch, members[0].lm_head.weight)
    options = {"num_beams": 4, "max_new_tokens": 8, "nbest": 2, "scores": True, "prefixes": ["die", "", "das", ""]}
    once = ensemble.translate_hypotheses(SOURCES, **options)
    assert len(calls) == 2 * 2  # per member: once for the search, once in the one forward that scores the outputs
    calls.clear()
    monkeypatch.setattr(FixNormLinear, "rows_normalized_once", lambda self: contextlib.nullcontext())
    every_step = ensemble.translate_hypotheses(SOURCES, **options)
    assert len(calls) > 2 * 8
    assert [[(h.text, h.score) for h in hs] for hs in once] == [[(h.text, h.score) for h in hs] for hs in every_step]


def test_an_ensembles_step_log_probabilities_are_the_mean_of_its_members(tmp_path):
    tokenizer = tiny_tokenizer()
    a, b = save_random_model(tmp_path / "a", 1), save_random_model(tmp_path / "b", 2)
    batch = tokenizer(SOURCES[:2], padding=True, return_tensors="pt")
    step = EnsembleStep([a, b], batch["input_ids"], batch["attention_mask"], num_beams=1)
    decoder = torch.tensor([[a.config.decoder_start_token_id, 300], [a.config.decoder_start_token_id, 17]])
    with torch.no_grad():
        step(decoder[:, :1])
        ensemble = step(decoder[:, 1:])  # through the cache
        members = [torch.log_softmax(m(**batch, decoder_input_ids=decoder).logits[:, -1], -1) for m in (a, b)]
    assert not torch.allclose(members[0], members[1], atol=1e-2)
    assert torch.allclose(ensemble, (members[0] + members[1]) / 2, atol=1e-5)


def test_an_ensemble_of_a_model_with_itself_is_that_model(model_folder, translator):
    ensemble = Translator([model_folder, model_folder], device="cpu")
    for options in ({"num_beams": 4, "nbest": 2, "scores": True}, {"num_beams": 1, "scores": True},
                    {"num_beams": 4, "paper_decoding": True, "scores": True, "alignment": True}):  # fmt: skip
        ours = ensemble.translate_hypotheses(SOURCES + ["ein Hund"], **options)
        single = translator.translate_hypotheses(SOURCES + ["ein Hund"], **options)
        assert [[h.text for h in hs] for hs in ours] == [[h.text for h in hs] for hs in single]
        flat = [h.score for hs in single for h in hs]
        assert [h.score for hs in ours for h in hs] == pytest.approx(flat, abs=1e-5)
        assert [[h.alignment for h in hs] for hs in ours] == [[h.alignment for h in hs] for hs in single]


def test_an_ensemble_of_two_models_decodes_their_mean_and_differs_where_they_disagree(tmp_path):
    """Greedy over the mean of the members' log-probabilities: every token the ensemble chose is its step's best
    mean under the members' full forwards (within `TIE`), and it is the greedy loop written here wherever that loop
    met no tie."""
    tokenizer = tiny_tokenizer()
    # Random members that write tokens (seed 1's only repeats its start token: empty outputs that its mean with any
    # other member copies; 4 of the 5 seed pairs tried show the ensemble's own outputs)
    members = [save_random_model(tmp_path / "a", 3), save_random_model(tmp_path / "b", 4)]
    ensemble = Translator([tmp_path / "a", tmp_path / "b"], device="cpu")
    alone = [Translator(tmp_path / name, device="cpu") for name in ("a", "b")]
    outputs = ensemble.translate(SOURCES, num_beams=1, max_new_tokens=8)
    member_outputs = [t.translate(SOURCES, num_beams=1, max_new_tokens=8) for t in alone]
    start, eos = members[0].config.decoder_start_token_id, tokenizer.eos_token_id

    def mean_log_probs(batch, decoder):  # (T, V): the next-token mean after each prefix of `decoder`
        with torch.no_grad():
            return sum(torch.log_softmax(m(**batch, decoder_input_ids=torch.tensor([decoder])).logits[0], -1)
                       for m in members) / 2  # fmt: skip

    for index, source in enumerate(SOURCES):
        batch = tokenizer([source], return_tensors="pt")
        (hypothesis,) = ensemble.engine.generate([batch["input_ids"][0].tolist()], num_beams=1, max_new_tokens=8)[0]
        assert outputs[index] == tokenizer.decode(hypothesis.ids, skip_special_tokens=True)
        chosen = hypothesis.ids if len(hypothesis.ids) == 7 else [*hypothesis.ids, eos]  # the 8th may only be EOS
        mean = mean_log_probs(batch, [start, *chosen[:-1]])  # (len(chosen), V)
        mean[0, eos] = float("-inf")  # at least one token
        shortfalls = mean.max(-1).values - mean.gather(-1, torch.tensor(chosen)[:, None])[:, 0]
        assert float(shortfalls.max()) <= TIE, shortfalls
        decoder, margin = [start], float("inf")  # greedy by hand, one full forward a step
        while len(decoder) < 8:
            step = mean_log_probs(batch, decoder)[-1]
            if len(decoder) == 1:
                step[eos] = float("-inf")
            top = step.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            decoder.append(int(step.argmax()))
            if decoder[-1] == eos:
                break
        if margin > TIE:
            assert outputs[index] == tokenizer.decode(decoder[1:], skip_special_tokens=True)
    disagree = [i for i in range(len(SOURCES)) if member_outputs[0][i] != member_outputs[1][i]]
    assert disagree
    assert any(outputs[i] not in (member_outputs[0][i], member_outputs[1][i]) for i in disagree)


def test_ensemble_members_must_share_the_tokenizer(model_folder, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(model_folder, other)
    train_bpe_tokenizer(iterator=["entirely different words here", "and some more"], vocab_size=330,
                        min_frequency=1, model_max_length=64).save_pretrained(other)  # fmt: skip
    with pytest.raises(TranslateError, match="must share one tokenizer.*vocabulary"):
        Translator([model_folder, other], device="cpu")
    source = write_lines(tmp_path / "in.txt", SOURCES[:1])
    assert run_cli("translate", "--model", str(model_folder), "--model", str(other), "--input", str(source)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the models of an ensemble must share one tokenizer")


def test_ensembles_refuse_ctranslate2_folders(model_folder, exported, tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", SOURCES[:1])
    assert run_cli("translate", "--model", str(model_folder), "--model", str(exported["float32"]),
                   "--input", str(source)) == 2  # fmt: skip
    assert "ensembles run on PyTorch only" in capsys.readouterr().err


def test_an_ensemble_scores_with_the_mean_of_its_members_log_probabilities(tmp_path):
    save_random_model(tmp_path / "a", 1), save_random_model(tmp_path / "b", 2)
    targets = TARGETS[:2] + ["ein Hund", ""]
    ensemble = Translator([tmp_path / "a", tmp_path / "b"], device="cpu").score(SOURCES, targets)
    members = [Translator(tmp_path / name, device="cpu").score(SOURCES, targets) for name in ("a", "b")]
    for ours, a, b in zip(ensemble, *members, strict=True):
        mean = [(x + y) / 2 for x, y in zip(a.token_log_probs, b.token_log_probs, strict=True)]
        assert ours.token_log_probs == pytest.approx(mean, abs=1e-5)
        assert a.token_log_probs != pytest.approx(b.token_log_probs, abs=1e-3)


# ---------------------------------------------------------------------------------------------------------------
# When a sentence stops
# ---------------------------------------------------------------------------------------------------------------
class ScriptedStep:
    """A step function whose next-token probabilities depend only on the last token (`table`: token -> {token: p}):
    a search whose every score is known exactly, on any CPU. Its cache is nothing to reorder."""

    def __init__(self, table: dict[int, dict[int, float]], vocab_size: int):
        self.log_probs = torch.full((vocab_size, vocab_size), float("-inf"))
        for token, following in table.items():
            for after, p in following.items():
                self.log_probs[token, after] = torch.log(torch.tensor(p))

    def __call__(self, last_tokens: torch.Tensor) -> torch.Tensor:
        return self.log_probs[last_tokens[:, 0]]  # (B * K, V)

    def reorder(self, beams: torch.Tensor) -> None:
        pass


@pytest.mark.parametrize("paper_decoding", [False, True])
def test_an_eos_outside_the_k_best_extensions_finishes_a_hypothesis_only_in_the_papers_search(paper_decoding):
    """START=0, EOS=1, PAD=2, A=3, B=4, C=5; one beam. After START, A (0.55) beats EOS (0.45): EOS ranks 2nd of the
    2K = 2 best extensions. transformers' beam search finishes only extensions ranked among the K best (its
    `top_num_beam_mask`), so one beam is greedy decoding, A B EOS, as generate(num_beams=1) is, though the empty
    output would score better (log 0.45 / 1 against log(0.55 * 0.5 * 0.4) / 3 ** 0.6); tensor2tensor's search
    (`paper_beam_search`) finishes every one of the 2K, and the empty output wins there (GNMT's lp: log 0.45 against
    log 0.11 / (8 / 6) ** 0.6)."""
    from vaswani.inference.search import beam_search

    table = {0: {3: 0.55, 1: 0.45}, 3: {4: 0.5, 3: 0.3, 1: 0.2}, 4: {1: 0.4, 5: 0.35, 3: 0.25}, 5: {1: 1.0}}
    output = beam_search(
        ScriptedStep(table, 6), torch.tensor([8]), num_beams=1, length_penalty=0.6, paper_decoding=paper_decoding,
        num_return=1, start_id=0, eos_id=1, pad_id=2, min_new_tokens=0,
        early_stopping="never" if paper_decoding else False,
    )  # fmt: skip
    assert [t for t in output[0].tolist() if t != 2] == ([0, 1] if paper_decoding else [0, 3, 4, 1])


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_the_search_stops_as_generate_does_and_so_takes_fewer_steps_than_the_exact_rule(alpha):
    """early_stopping=False (the model's generation_config, generate()'s default): the same 4 hypotheses as
    generate() itself; "never" (the paper's exact rule at the cap) searches longer."""
    from vaswani.inference.search import beam_search

    model, tokenizer = trained_model_and_tokenizer()
    sources = SOURCES + ["the cat", "a dog runs in the park and the cat sat on the mat", "ein Hund"]
    batch = tokenizer(sources, padding=True, return_tensors="pt")
    cap, config = 40, model.config
    with torch.no_grad():
        reference = model.generate(**batch, num_beams=4, num_return_sequences=4, max_new_tokens=cap,
                                   early_stopping=False, length_penalty=alpha, min_new_tokens=1)  # fmt: skip
    steps, outputs = {}, {}
    for rule in (False, "never"):
        step = EnsembleStep([model], batch["input_ids"], batch["attention_mask"], num_beams=4)
        calls = []

        def counted(last_tokens, step=step, calls=calls):
            calls.append(1)
            return step(last_tokens)

        counted.reorder = step.reorder
        outputs[rule] = beam_search(
            counted, torch.full((len(sources),), cap), num_beams=4, length_penalty=alpha, paper_decoding=False,
            num_return=4, start_id=config.decoder_start_token_id, eos_id=config.eos_token_id,
            pad_id=config.pad_token_id, min_new_tokens=1, early_stopping=rule,
        )  # fmt: skip
        steps[rule] = len(calls)

    def texts(ids):
        return tokenizer.batch_decode(ids, skip_special_tokens=True)

    assert texts(outputs[False]) == texts(reference)
    assert steps[False] <= steps["never"], steps  # equal where every search of this model (trained here) runs long


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_the_search_stops_when_no_running_beam_can_win_and_the_exact_rule_searches_on(alpha):
    """START=0, EOS=1, PAD=2, A=3, B=4, C=5; two beams, a cap of 20 tokens. A and B end (EOS, 0.8) at step 2 with
    log 0.4 each; the running beams (A C, B C: log 0.1) score worse at their length, so early_stopping=False stops
    there. "never" compares the best score they could reach at the cap (their log-probability over 20 ** alpha) and
    searches on: at alpha 1.0 that finds a better, longer output (C repeated, each 0.9), at 0.6 it stops once the
    cap's bound falls below the finished ones, and returns them. Exact scores: the same on every CPU."""
    from vaswani.inference.search import beam_search

    table = {0: {3: 0.5, 4: 0.5}, 3: {1: 0.8, 5: 0.2}, 4: {1: 0.8, 5: 0.2}, 5: {5: 0.9, 1: 0.1}}
    steps, outputs = {}, {}
    for rule in (False, "never"):
        scripted, calls = ScriptedStep(table, 6), []

        def counted(last_tokens, scripted=scripted, calls=calls):
            calls.append(1)
            return scripted(last_tokens)

        counted.reorder = scripted.reorder
        output = beam_search(
            counted, torch.tensor([20]), num_beams=2, length_penalty=alpha, paper_decoding=False, num_return=2,
            start_id=0, eos_id=1, pad_id=2, min_new_tokens=1, early_stopping=rule,
        )  # fmt: skip
        steps[rule], outputs[rule] = len(calls), sorted([t for t in ids if t != 2] for ids in output.tolist())
    assert steps[False] == 2 and outputs[False] == [[0, 3, 1], [0, 4, 1]]
    assert steps["never"] > steps[False]
    if alpha == 1.0:
        assert steps["never"] == 20 and outputs["never"] == [[0, 3, *[5] * 18, 1], [0, 4, *[5] * 18, 1]]
    else:
        assert outputs["never"] == outputs[False]
