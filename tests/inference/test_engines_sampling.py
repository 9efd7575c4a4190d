"""Random sampling instead of beam search (`vaswani translate --do_sample`, `Sampling`), on both engines. The reference
is the model's own next-token distribution: the first token of many samples of one sentence, counted, must follow
softmax(logits / temperature) (restricted to the top k, or to the nucleus of top_p) of the model's forward pass, and
top_k 1 is greedy search. A seed gives the same samples again; every combination sampling cannot honour is refused."""

import json

import pytest
import torch
from test_pipeline_vaswani import one_torch_thread  # noqa: F401  (an autouse fixture: one thread for tiny tensors)

from vaswani.cli import main
from vaswani.errors import TranslateError
from vaswani.inference.engines import Sampling
from vaswani.inference.translator import Translator

SOURCES = ["the cat sat on the mat", "a dog runs in the park", "the weather is nice today", "we read a book at home"]
SAMPLES = 6000  # first tokens drawn per check: the counts' distance from the truth (`distance`) is ~0.01 at this size


@pytest.fixture(scope="module")
def export(model_folder, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    folder = tmp_path_factory.mktemp("sampling") / "ct2"
    assert main(["export", "--model", str(model_folder), "--output_dir", str(folder)]) == 0
    return folder


@pytest.fixture(params=["torch", "ctranslate2"])
def folder(request, model_folder):
    return model_folder if request.param == "torch" else request.getfixturevalue("export")


def first_token_distribution(model, tokenizer, sentence: str) -> torch.Tensor:
    """The model's logits for the first output token of `sentence`, as sampling sees them: EOS (min_new_tokens 1),
    PAD and the decoder's start token (never an output token) and the generation config's bad words masked."""
    batch = tokenizer([sentence], return_tensors="pt")
    start = torch.tensor([[model.config.decoder_start_token_id]])
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=start).logits[0, -1].clone()  # (V,)
    config = model.config
    for token in (config.eos_token_id, config.pad_token_id, config.decoder_start_token_id):
        logits[token] = float("-inf")
    for (word,) in model.generation_config.bad_words_ids or []:
        logits[word] = float("-inf")
    return logits


def reference(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The probabilities sampling draws from: softmax(logits / T), cut to the top k, then to the nucleus of top_p
    (the fewest most probable tokens whose mass reaches p), renormalized."""
    probabilities = torch.softmax(logits.double() / temperature, dim=-1)
    order = probabilities.argsort(descending=True)
    keep = torch.zeros_like(probabilities, dtype=torch.bool)
    kept = order[:top_k] if top_k else order
    mass = probabilities[kept].cumsum(0)
    kept = kept[: int((mass < top_p - 1e-9).sum()) + 1]
    keep[kept] = True
    probabilities = probabilities * keep
    return probabilities / probabilities.sum()


def distance(p: torch.Tensor, q: torch.Tensor, by: torch.Tensor, buckets: int = 10) -> float:
    """The total variation between `p` and `q` over the `buckets` most probable tokens of `by`, one by one, and the
    rest together: over hundreds of rare tokens the counts' noise would add up to more than a wrong temperature."""
    top = by.argsort(descending=True)[:buckets]
    rest = torch.ones_like(by, dtype=torch.bool)
    rest[top] = False
    return 0.5 * float((p[top] - q[top]).abs().sum() + (p[rest].sum() - q[rest].sum()).abs())


def sampled_first_tokens(translator: Translator, sentence: str, sampling: Sampling) -> torch.Tensor:
    """The frequency of each first token over `SAMPLES` samples of `sentence` (its `nbest` samples, one step each)."""
    ids = translator.tokenizer([sentence])["input_ids"][0]
    (hypotheses,) = translator.engine.generate([ids], num_beams=1, num_hypotheses=SAMPLES, max_new_tokens=1,
                                               sampling=sampling)  # fmt: skip
    counts = torch.bincount(torch.tensor([h.ids[0] for h in hypotheses]), minlength=len(translator.tokenizer))
    return counts.double() / SAMPLES


@pytest.mark.parametrize(
    "options",
    [{"temperature": 2.0}, {"temperature": 3.0, "top_k": 3}, {"temperature": 3.0, "top_p": 0.6}],
    ids=["temperature", "top-k", "top-p"],
)
def test_the_first_sampled_token_follows_the_models_distribution(folder, model_folder, options):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import modeling_vaswani  # noqa: F401  (registers the model type)

    model = AutoModelForSeq2SeqLM.from_pretrained(model_folder).eval()
    logits = first_token_distribution(model, AutoTokenizer.from_pretrained(model_folder), SOURCES[0])
    truth, untempered = reference(logits, **options), reference(logits)
    assert distance(truth, untempered, truth) > 0.15  # the options change the distribution: the check can fail
    translator = Translator(folder, device="cpu", seed=0, parallel_batches=1)
    drawn = sampled_first_tokens(translator, SOURCES[0], Sampling(**options))
    assert distance(drawn, truth, truth) < 0.04, (options, drawn.topk(5), truth.topk(5))
    assert drawn[truth == 0].sum() == 0  # nothing outside the top k or the nucleus
    assert (drawn > 0).sum() >= min(3, int((truth > 0.01).sum()))  # not one token over and over


def test_sampling_from_the_top_token_alone_is_greedy_search(folder):
    translator = Translator(folder, device="cpu")
    greedy = translator.translate(SOURCES, num_beams=1)
    assert translator.translate(SOURCES, num_beams=1, sampling=Sampling(top_k=1)) == greedy
    assert translator.translate(SOURCES, num_beams=1, sampling=Sampling(temperature=1e-4)) == greedy
    # a nucleus below any token's probability (under float32's smallest number, for CTranslate2) is the top token
    assert translator.translate(SOURCES, num_beams=1, sampling=Sampling(top_p=1e-300)) == greedy


def test_a_top_k_over_the_vocabulary_is_every_token(folder):
    """transformers takes it as every token; CTranslate2 refused it (a ValueError: a 500 from the server)."""

    def samples(top_k: int) -> list[str]:  # each from a Translator seeded anew (PyTorch's generator is the process's)
        translator = Translator(folder, device="cpu", seed=3, parallel_batches=1)
        return translator.translate(SOURCES, num_beams=1, sampling=Sampling(top_k=top_k, temperature=2.0))

    assert samples(10**6) == samples(0)


def test_a_seed_gives_the_same_samples_again_and_another_seed_others(folder):
    def samples(seed: int) -> list[list[str]]:
        translator = Translator(folder, device="cpu", seed=seed, parallel_batches=1)
        results = translator.translate_hypotheses(SOURCES, num_beams=1, nbest=3, sampling=Sampling(temperature=3.0))
        return [[translation.text for translation in hypotheses] for hypotheses in results]

    first = samples(7)
    assert samples(7) == first
    assert samples(8) != first
    assert all(len(hypotheses) == 3 for hypotheses in first)
    assert len({text for hypotheses in first for text in hypotheses}) > len(SOURCES)  # samples differ


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_beams": 4}, "num_beams must be 1, not 4"),
        ({"prefixes": ["die", None, None, None]}, "sampling does not take prefixes or constraints"),
        ({"constraints": [["Katze"], [], [], []]}, "sampling does not take prefixes or constraints"),
    ],
)
def test_what_sampling_cannot_honour_is_refused(model_folder, options, message):
    translator = Translator(model_folder, device="cpu")
    with pytest.raises(TranslateError, match=message):
        translator.translate(SOURCES, **{"num_beams": 1, **options}, sampling=Sampling())


def test_an_ensemble_does_not_sample(model_folder):
    ensemble = Translator([model_folder, model_folder], device="cpu")
    with pytest.raises(TranslateError, match="an ensemble decodes with beam search only: sample with one model"):
        ensemble.translate(SOURCES, num_beams=1, sampling=Sampling())


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"top_k": -1}, "top_k=-1: use 0"),
        ({"top_p": 0}, "top_p=0: use a probability above 0"),
        ({"top_p": 1.5}, "top_p=1.5"),
        ({"temperature": 0}, "temperature=0: use a finite number above 0"),
        ({"temperature": float("inf")}, "temperature=inf"),
    ],
)
def test_bad_sampling_values_are_refused(values, message):
    with pytest.raises(TranslateError, match=message):
        Sampling(**values)


# ---------------------------------------------------------------------------------------------------------------
# vaswani translate --do_sample
# ---------------------------------------------------------------------------------------------------------------
def test_the_command_samples_reproducibly_with_a_seed(folder, tmp_path, capsys):
    (tmp_path / "input.txt").write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    argv = ["translate", "--model", str(folder), "--input", str(tmp_path / "input.txt"), "--no_progress",
            "--do_sample", "--temperature", "3", "--nbest", "2", "--output_format", "jsonl"]  # fmt: skip
    outputs = []
    for seed, name in ((5, "a"), (5, "b"), (6, "c")):
        assert main([*argv, "--seed", str(seed), "--output", str(tmp_path / name)]) == 0
        outputs.append((tmp_path / name).read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and outputs[0] != outputs[2]
    records = [json.loads(line) for line in outputs[0].splitlines()]
    assert [len(record["hypotheses"]) for record in records] == [2] * len(SOURCES)
    # top_k 1 prints what greedy search prints
    greedy = ["translate", "--model", str(folder), "--input", str(tmp_path / "input.txt"), "--no_progress"]
    assert main([*greedy, "--num_beams", "1", "--output", str(tmp_path / "greedy")]) == 0
    assert main([*greedy, "--do_sample", "--top_k", "1", "--output", str(tmp_path / "top1")]) == 0
    assert (tmp_path / "top1").read_text(encoding="utf-8") == (tmp_path / "greedy").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--top_k", "5"],
            "--top_k: it sets random sampling, which --do_sample turns on: add --do_sample, or leave it",
        ),
        (["--temperature", "2", "--seed", "1"], "--temperature and --seed: they set random sampling"),
        (["--do_sample", "--num_beams", "4"], "--num_beams 4 does not go with it"),
        (["--do_sample", "--paper_decoding"], "--do_sample does not go with --paper_decoding"),
        (["--do_sample", "--prefix", "{input}"], "--do_sample does not go with --prefix"),
        (["--do_sample", "--model", "{model}"], "--do_sample samples from one model"),
        (["--do_sample", "--seed", "1", "--parallel_batches", "2"], "--parallel_batches 2 does not go with it"),
        (["--do_sample", "--top_p", "0"], "argument --top_p: must be a number above 0 and at most 1"),
        (["--do_sample", "--top_k", "-2"], "argument --top_k: must be at least 0"),
        (["--do_sample", "--temperature", "0"], "argument --temperature: must be a number above 0"),
    ],
)
def test_the_command_refuses_what_sampling_cannot_honour(model_folder, tmp_path, capsys, extra, message):
    (tmp_path / "input.txt").write_text("the cat\n", encoding="utf-8")
    extra = [argument.format(input=tmp_path / "input.txt", model=model_folder) for argument in extra]
    argv = ["translate", "--model", str(model_folder), "--input", str(tmp_path / "input.txt"), "--no_progress"]
    assert main([*argv, *extra, "--output", str(tmp_path / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not (tmp_path / "out.txt").exists()
