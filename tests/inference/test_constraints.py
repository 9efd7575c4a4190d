"""Lexically constrained decoding (issue 29, `vaswani.inference.constraints`): against a brute-force search over every
output of a tiny model, the bookkeeping of phrases (unwinding), dynamic beam allocation, and the command line
(`--constraints FILE`, a "constraints" field in JSON lines, errors and warnings)."""

import itertools
import json

import pytest
import torch
from conftest import tiny_model
from test_pipeline_vaswani import one_torch_thread  # noqa: F401  (an autouse fixture)
from test_search import SOURCES, write_lines

from vaswani.cli import main
from vaswani.inference.constraints import ConstraintState, allocate, constrained_beam_search
from vaswani.inference.search import EnsembleStep
from vaswani.inference.translator import Translation, Translator

EOS, START, PAD = 2, 1, 0


# ---------------------------------------------------------------------------------------------------------------
# Against brute force
# ---------------------------------------------------------------------------------------------------------------
def contains(sequence, phrase) -> bool:
    return any(tuple(sequence[i : i + len(phrase)]) == tuple(phrase) for i in range(len(sequence)))


def brute_force(model, input_ids, phrases, cap, alpha, top=3):
    """Every output of 1 to cap - 1 tokens then EOS (EOS not first), scored by the model's teacher-forced forward
    as sum of log-probabilities / length ** alpha; the `top` best that contain every phrase."""
    vocab = model.config.vocab_size
    scored = []
    for length in range(1, cap):
        for body in itertools.product([t for t in range(vocab) if t != EOS], repeat=length):
            if not all(contains(body, phrase) for phrase in phrases):
                continue
            labels = torch.tensor([[*body, EOS]])
            decoder = torch.tensor([[START, *body]])
            with torch.no_grad():
                logits = model(input_ids=input_ids, decoder_input_ids=decoder).logits
            total = torch.log_softmax(logits[0], -1).gather(-1, labels[0][:, None]).sum().item()
            scored.append((total / (length + 1) ** alpha, list(body)))
    return sorted(scored, key=lambda entry: -entry[0])[:top]


@pytest.mark.parametrize("phrases", [[[5]], [[4, 6]], [[3], [6, 6]]])
def test_a_beam_wide_enough_to_hold_every_hypothesis_finds_the_brute_force_best(phrases):
    """With K >= V ** (cap - 1) every partial output stays in the beam: the constrained search must return exactly
    the best outputs that contain the phrases (and dynamic beam allocation must not lose any)."""
    vocab, cap, alpha = 7, 4, 0.6
    model = tiny_model(seed=3, vocab_size=vocab, d_model=16, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=START,
                       decoder_start_token_id=START).eval()  # fmt: skip
    input_ids = torch.tensor([[4, 5, 6, 3, EOS]])
    num_beams = vocab ** (cap - 1)
    step = EnsembleStep([model], input_ids, torch.ones_like(input_ids), num_beams)
    output = constrained_beam_search(step, torch.tensor([cap]), [phrases], num_beams=num_beams, length_penalty=alpha,
                                     paper_decoding=False, num_return=3, start_id=START, eos_id=EOS, pad_id=PAD)  # fmt: skip
    expected = brute_force(model, input_ids, phrases, cap, alpha)
    got = [row[1 : row.index(EOS)] for row in output.tolist()]
    assert got[: len(expected)] == [body for _, body in expected]
    # fewer than 3 outputs of this length contain the phrases: the rest are those that end at the cap without them
    assert not any(all(contains(body, phrase) for phrase in phrases) for body in got[len(expected) :])


def test_a_small_beam_still_produces_every_phrase_and_ends():
    model = tiny_model(seed=4, vocab_size=30, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=START,
                       decoder_start_token_id=START).eval()  # fmt: skip
    input_ids = torch.tensor([[4, 5, 6, 7, 8, EOS], [9, 10, 11, EOS, PAD, PAD]])
    mask = (input_ids != PAD).long()
    phrases = [[[20, 21, 22], [7]], [[13, 13]]]
    for num_beams in (1, 2, 4):
        step = EnsembleStep([model], input_ids, mask, num_beams)
        output = constrained_beam_search(step, torch.tensor([12, 12]), phrases, num_beams=num_beams,
                                         length_penalty=0.6, paper_decoding=True, num_return=1, start_id=START,
                                         eos_id=EOS, pad_id=PAD)  # fmt: skip
        for row, wanted in zip(output.tolist(), phrases, strict=True):
            assert all(contains(row, phrase) for phrase in wanted)
            assert EOS in row


def test_a_phrase_left_half_way_unwinds_and_can_start_again():
    state = ConstraintState.start([[5, 6, 7], [9]])
    assert state.wanted() == {5, 9} and state.met_tokens == 0
    state = state.advance(5).advance(6)
    assert state.progress == (0, 2) and state.met_tokens == 2 and state.wanted() == {7}
    unwound = state.advance(8)
    assert unwound.progress is None and unwound.met_tokens == 0
    restarted = state.advance(5)  # leaving the phrase with its own first token starts it again
    assert restarted.progress == (0, 1)
    done = state.advance(7).advance(9)
    assert done.all_met and done.met_tokens == 4 and done.wanted() == set()


def test_dynamic_beam_allocation_gives_each_bank_its_turn():
    states = {n: ConstraintState((tuple(range(10, 13)),), (False,), (0, n) if n else None) for n in range(3)}
    candidates = [(-1.0, 0, 1, states[0]), (-1.5, 0, 2, states[0]), (-2.0, 0, 3, states[0]), (-9.0, 1, 4, states[2]),
                  (-8.0, 2, 5, states[1]), (-7.0, 2, 6, states[1])]  # fmt: skip
    chosen = allocate(candidates, 4)
    # turn 1: the best of banks 2, 1, 0; turn 2: the next best of bank 1 (bank 2 is empty)
    assert [(c[1], c[2]) for c in chosen] == [(1, 4), (2, 6), (0, 1), (2, 5)]


# ---------------------------------------------------------------------------------------------------------------
# The trained model, the Translator and the command line
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def translator(model_folder):
    return Translator(model_folder, device="cpu")


CONSTRAINTS = [["Hund"], [], ["Buch", "heute"], ["Katze sitzt"]]


@pytest.mark.parametrize("num_beams", [1, 4])
def test_every_phrase_appears_in_the_translation(translator, num_beams):
    plain = translator.translate(SOURCES, num_beams=num_beams)
    outputs = translator.translate_hypotheses(SOURCES, num_beams=num_beams, nbest=num_beams // 2 or 1, scores=True,
                                              alignment=True, constraints=CONSTRAINTS)  # fmt: skip
    for hypotheses, phrases, reference in zip(outputs, CONSTRAINTS, plain, strict=True):
        for hypothesis in hypotheses:
            assert all(phrase in hypothesis.text for phrase in phrases)
            assert hypothesis.alignment
        if not phrases:  # a sentence without constraints: the unconstrained translation
            assert hypotheses[0].text == reference


def test_lines_without_constraints_are_batched_apart_and_take_the_fast_path(translator, monkeypatch):
    """One constrained line does not put the others on the constrained search: the engine gets the lines without
    constraints in batches of their own, with no `constraints` (its `generate()` path), and the same translations."""
    calls = []
    original = translator.engine.generate

    def spying(sources, **kwargs):
        calls.append((len(sources), kwargs.get("constraints")))
        return original(sources, **kwargs)

    monkeypatch.setattr(translator.engine, "generate", spying)
    got = translator.translate(SOURCES, constraints=CONSTRAINTS)
    assert sorted((n, c is None) for n, c in calls) == [(1, True), (3, False)]  # CONSTRAINTS: one line has none
    assert all(all(phrases) for n, phrases in calls if phrases is not None)
    assert got[1] == translator.translate([SOURCES[1]])[0]


@pytest.mark.parametrize("early_stopping", [False, "never"])
def test_finished_sentences_leave_the_batch_and_the_others_decode_as_alone(translator, early_stopping):
    """A sentence that is done stops being computed (the step gets fewer rows); every sentence, a prefixed one too,
    comes out as it does searched alone (batch of 1: no other sentence's rows, nothing to leave)."""
    from vaswani.inference.search import PrefixForcing, split_prefix

    model, tokenizer = translator.engine.model, translator.tokenizer
    sources = [SOURCES[0], "a dog", SOURCES[2], SOURCES[3] + " and a dog runs in the park"]
    phrases = [[tokenizer(" " + p, add_special_tokens=False)["input_ids"] for p in sentence]
               for sentence in (["Katze"], [], ["Buch", "heute"], ["Hund"])]  # fmt: skip
    prefixes = ["die", "", "", "wir lesen ein Buch und ein Hund läuft im Park und die Katze sitzt auf der Ma"]
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    config = model.config

    def search(indices):
        batch = tokenizer([sources[i] for i in indices], padding=True, return_tensors="pt")
        step = EnsembleStep([model], batch["input_ids"], batch["attention_mask"], num_beams=4)
        rows = []

        def counted(last_tokens):
            rows.append(last_tokens.shape[0])
            return step(last_tokens)

        counted.reorder = step.reorder
        split = [split_prefix(tokenizer(prefixes[i], add_special_tokens=False)["input_ids"], pieces) for i in indices]
        prefix = PrefixForcing([ids for ids, _ in split], [partial for _, partial in split], pieces,
                               set(tokenizer.all_special_ids), 4, "cpu")  # fmt: skip
        output = constrained_beam_search(
            counted, torch.full((len(indices),), 60), [phrases[i] for i in indices], num_beams=4, length_penalty=0.6,
            paper_decoding=False, num_return=2, start_id=config.decoder_start_token_id, eos_id=config.eos_token_id,
            pad_id=config.pad_token_id, prefix=prefix, early_stopping=early_stopping,
        )  # fmt: skip
        return tokenizer.batch_decode(output, skip_special_tokens=True), rows

    together, rows = search(range(len(sources)))
    alone = [text for i in range(len(sources)) for text in search([i])[0]]
    assert together == alone
    assert together[0].startswith("die") and together[6].startswith(prefixes[3]) and "Hund" in together[6]
    assert rows[0] == 4 * len(sources) and rows[-1] < rows[0] and rows == sorted(rows, reverse=True)


def test_an_ensemble_decodes_with_constraints(model_folder, translator):
    ensemble = Translator([model_folder, model_folder], device="cpu")
    assert ensemble.translate(SOURCES, constraints=CONSTRAINTS) == translator.translate(
        SOURCES, constraints=CONSTRAINTS
    )


def test_a_phrase_that_does_not_fit_still_gives_a_translation_and_a_warning(translator):
    unmet = []
    outputs = translator.translate(SOURCES[:2], max_new_tokens=3, constraints=[["Hund"], ["Hund"]],
                                   on_unmet=lambda index, phrases: unmet.append((index, phrases)))  # fmt: skip
    assert all(outputs) and sorted(unmet) == [(0, ["Hund"]), (1, ["Hund"])]


def test_constraints_file_and_jsonl_field_give_the_same_output(model_folder, tmp_path, translator):
    sources = [SOURCES[0], "", SOURCES[2]]
    constraints = [["Hund"], [], ["Buch", "heute"]]
    source = write_lines(tmp_path / "in.txt", sources)
    constraints_file = write_lines(tmp_path / "c.txt", [" ||| ".join(phrases) for phrases in constraints])
    jsonl = write_lines(tmp_path / "in.jsonl", [json.dumps({"text": t, "constraints": c})
                                                for t, c in zip(sources, constraints, strict=True)])  # fmt: skip
    common = ["translate", "--model", str(model_folder), "--no_progress", "--nbest", "2", "--scores"]
    assert main([*common, "--input", str(source), "--constraints", str(constraints_file), "--output",
                 str(tmp_path / "a")]) == 0  # fmt: skip
    assert main([*common, "--input", str(jsonl), "--input_format", "jsonl", "--output", str(tmp_path / "b")]) == 0
    lines = (tmp_path / "a").read_text().splitlines()
    assert lines == (tmp_path / "b").read_text().splitlines()
    expected = translator.translate_hypotheses(sources, nbest=2, constraints=constraints)
    assert [line.split(" ||| ")[1] for line in lines] == [h.text for hs in expected for h in hs or [Translation("")]]
    texts = {int(line.split(" ||| ")[0]): line.split(" ||| ")[1] for line in lines}
    assert "Hund" in texts[0] and "Buch" in texts[2] and "heute" in texts[2]


def test_the_command_line_warns_about_a_phrase_that_does_not_fit(model_folder, tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", SOURCES[:1])
    constraints = write_lines(tmp_path / "c.txt", ["Hund"])
    assert main(["translate", "--model", str(model_folder), "--input", str(source), "--constraints",
                 str(constraints), "--max_new_tokens", "3", "--output", str(tmp_path / "out")]) == 0  # fmt: skip
    assert "warning: the translation of line 1 lacks the constraint(s) 'Hund'" in capsys.readouterr().err
    assert len((tmp_path / "out").read_text().splitlines()) == 1


@pytest.mark.parametrize(
    "case, message",
    [
        ("fewer", "the constraints end after line 1"),
        ("more", "more lines of constraints than the 2 input lines"),
        ("empty_phrase", "line 1 has an empty constraint"),
        ("jsonl_not_a_list", '"constraints" must be a list of strings'),
        ("ctranslate2", "CTranslate2 has no lexically constrained decoding"),
    ],
)
def test_bad_constraints_are_a_one_line_error(model_folder, tmp_path, capsys, case, message):
    source = write_lines(tmp_path / "in.txt", SOURCES[:2])
    lines = {"fewer": ["Hund"], "more": ["Hund", "", "Buch"], "empty_phrase": ["Hund |||  ||| Katze", ""],
             "ctranslate2": ["Hund", ""]}.get(case, [])  # fmt: skip
    model = model_folder
    if case == "ctranslate2":
        pytest.importorskip("ctranslate2")
        from vaswani.export.ctranslate2 import export_ctranslate2

        model = export_ctranslate2(model_folder, tmp_path / "ct2")
    argv = ["translate", "--model", str(model), "--input", str(source), "--output", str(tmp_path / "out.txt"),
            "--no_progress"]  # fmt: skip
    if case == "jsonl_not_a_list":
        write_lines(source, [json.dumps({"text": "a dog", "constraints": "Hund"})])
        argv += ["--input_format", "jsonl"]
    else:
        argv += ["--constraints", str(write_lines(tmp_path / "c.txt", lines))]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out.txt").exists()


def test_constraints_and_a_prefix_together(translator):
    """The output starts with the prefix and holds the phrases; a phrase inside the prefix counts as met."""
    prefixes = ["ein Hu", "das Wetter ist ", "wir"]
    constraints = [["Park"], ["Buch"], ["lesen"]]
    outputs = translator.translate_hypotheses(SOURCES[1:], num_beams=4, nbest=2, prefixes=prefixes,
                                              constraints=constraints)  # fmt: skip
    for hypotheses, prefix, phrases in zip(outputs, prefixes, constraints, strict=True):
        for hypothesis in hypotheses:
            assert hypothesis.text.startswith(prefix) and all(p in hypothesis.text for p in phrases), hypothesis
    inside = translator.translate([SOURCES[1]], prefixes=["ein Hund"], constraints=[["Hund"]])
    assert inside == translator.translate([SOURCES[1]], prefixes=["ein Hund"])
