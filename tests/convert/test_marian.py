"""`vaswani convert --from marian`: a `MarianMTModel` shaped like OPUS-MT's (scaled down: d_model 16, 2+2 layers) with
random weights and a `MarianTokenizer` whose two sentencepiece models are trained here on gettext-en-es, converted into
a vaswani folder. The reference is transformers' own MarianMTModel: the converted model must give its logits (1e-5)
and its beam-search tokens on real sentences, `vaswani translate` must print its translations; every bad input is an
`error: ...` line (exit status 2) and the output folder is written atomically, never over an existing one."""

import io
import json
import pickle
import shutil
import time
import warnings
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, TINY
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import VaswaniConcatenatedSinusoidalPositionalEmbedding
from vaswani.cli import main
from vaswani.cli.convert import CONVERT_FORMATS
from vaswani.convert import CONVERTERS, convert_marian
from vaswani.convert.marian import load_pickled_tensors
from vaswani.errors import ConvertError
from vaswani.model_folder import load_model_folder

DATA = REPO_ROOT.parent / "shared" / "data" / "gettext-en-es"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"needs the shared data set {DATA}")

MAX_POSITIONS = 128  # Marian's table: sources and outputs stay below it
MAX_SOURCE_TOKENS = 40
MAX_LENGTH = 30  # generation_config.max_length of the test models (OPUS-MT: 512)


def read_pairs(split: str, count: int) -> list[tuple[str, str]]:
    pairs = []
    with open(DATA / f"{split}.jsonl", encoding="utf-8") as stream:
        for line in stream:
            row = json.loads(line)["translation"]
            if row["en"].strip() and row["es"].strip():
                pairs.append((row["en"], row["es"]))
            if len(pairs) == count:
                break
    return pairs


# ---------------------------------------------------------------------------------------------------------------
# The Marian side: tokenizer trained here, model with random weights, saved as an OPUS-MT folder
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def marian_tokenizer_dir(tmp_path_factory) -> Path:
    return write_marian_tokenizer_files(tmp_path_factory.mktemp("marian-tokenizer"))


def write_marian_tokenizer_files(folder: Path) -> Path:
    """source.spm (English) and target.spm (Spanish) trained on 3,000 pairs, and Marian's joint vocab.json: </s> = 0,
    <unk> = 1, the pieces of both models, <pad> last (OPUS-MT's layout)."""
    import sentencepiece as spm

    pairs = read_pairs("train", 3000)
    pieces: dict[str, None] = {}
    for side, name in ((0, "source.spm"), (1, "target.spm")):
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(pair[side] for pair in pairs), model_writer=model, vocab_size=250,
            character_coverage=1.0, model_type="unigram", minloglevel=2, num_threads=1,
        )  # fmt: skip
        (folder / name).write_bytes(model.getvalue())
        processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
        for i in range(processor.get_piece_size()):
            if not (processor.is_control(i) or processor.is_unknown(i)):
                pieces[processor.id_to_piece(i)] = None
    vocab = ["</s>", "<unk>", *pieces, "<pad>"]
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(vocab)}), encoding="utf-8")
    return folder


def marian_tokenizer(folder: Path) -> MarianTokenizer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MarianTokenizer(
            source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
            vocab=str(folder / "vocab.json"), source_lang="en", target_lang="es", model_max_length=MAX_POSITIONS,
        )  # fmt: skip


def marian_model(
    vocab_size: int, *, share: bool = True, activation: str = "swish", bias: bool = True, tie: bool = True, seed=0
) -> MarianMTModel:
    """OPUS-MT's configuration (PostNorm, scaled and tied embeddings, swish, PAD = last id = decoder start, EOS = 0)
    scaled down, with random weights large enough that sentences get different outputs, random biases and norms, and
    (`bias`) a random final logits bias, so that every part of the mapping matters."""
    pad = vocab_size - 1
    config = MarianConfig(
        **{key: TINY[key] for key in TINY if key not in ("vocab_size", "max_position_embeddings")},
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        max_position_embeddings=MAX_POSITIONS,
        activation_function=activation,
        share_encoder_decoder_embeddings=share,
        tie_word_embeddings=tie,
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        bos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        init_std=0.5,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "layer_norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
        if bias:
            model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias))
    model.generation_config = GenerationConfig(  # OPUS-MT's generation_config.json, max_length scaled down
        bad_words_ids=[[pad]], bos_token_id=0, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        max_length=MAX_LENGTH, num_beams=4, pad_token_id=pad, renormalize_logits=True,
    )  # fmt: skip
    return model


def save_marian(folder: Path, model: MarianMTModel, tokenizer_dir: Path, license: str | None = None) -> Path:
    model.save_pretrained(folder)
    marian_tokenizer(tokenizer_dir).save_pretrained(folder)
    if license:
        (folder / "README.md").write_text(f"---\nlicense: {license}\n---\n# A Marian model\n", encoding="utf-8")
    return folder


def sentences(count: int, tokenizer) -> list[str]:
    """Real English sentences of the test split short enough for the tiny models' position table."""
    picked = [en for en, _ in read_pairs("test", 400) if len(tokenizer(en)["input_ids"]) <= MAX_SOURCE_TOKENS]
    assert len(picked) >= count
    return picked[:count]


@pytest.fixture(scope="module")
def vocab_size(marian_tokenizer_dir) -> int:
    return len(marian_tokenizer(marian_tokenizer_dir))


VARIANTS = {
    f"{'shared' if share else 'separate'}-{activation}-{'bias' if bias else 'nobias'}": dict(
        share=share, activation=activation, bias=bias
    )
    for share in (True, False)
    for activation in ("swish", "relu")
    for bias in (True, False)
}
VARIANTS["shared-swish-bias-untied"] = dict(share=True, activation="swish", bias=True, tie=False)


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def converted(request, tmp_path_factory, marian_tokenizer_dir, vocab_size):
    """(Marian model, its folder, the converted folder) of each variant."""
    variant = VARIANTS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    marian = marian_model(vocab_size, seed=len(request.param), **variant)
    source = save_marian(root / "opus-mt-en-es", marian, marian_tokenizer_dir, license="cc-by-4.0")
    convert_marian(source, root / "converted")
    return marian, source, root / "converted", variant


# ---------------------------------------------------------------------------------------------------------------
# Same model
# ---------------------------------------------------------------------------------------------------------------
def test_converted_config_records_each_difference(converted, vocab_size):
    marian, _, output, variant = converted
    config = VaswaniConfig.from_pretrained(output)
    assert config.position_embedding_type == "sinusoidal" and config.sinusoidal_layout == "concatenated"
    assert config.activation_function == variant["activation"]
    assert config.share_embeddings is (variant["share"] and variant.get("tie", True))  # as transformers ties them
    assert config.tie_word_embeddings is variant.get("tie", True)
    assert config.final_logits_bias is variant["bias"]
    assert config.decoder_start_token_id == config.pad_token_id == vocab_size - 1 and config.eos_token_id == 0
    assert config.converted_from == {
        "format": "marian", "source": "opus-mt-en-es", "model_id": None, "license": "cc-by-4.0"
    }  # fmt: skip


def test_same_logits_as_marian_on_real_sentences(converted):
    marian, source, output, _ = converted
    model, tokenizer = load_model_folder(output)
    model.eval()
    pairs = read_pairs("validation", 8)
    batch = tokenizer([en for en, _ in pairs], text_target=[es for _, es in pairs], padding=True,
                      truncation=True, max_length=MAX_SOURCE_TOKENS, return_tensors="pt")  # fmt: skip
    labels = batch.pop("labels")
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    decoder_attention_mask = (decoder_input_ids != model.config.pad_token_id).long()
    decoder_attention_mask[:, 0] = 1  # the start token is PAD
    inputs = dict(**batch, decoder_input_ids=decoder_input_ids, decoder_attention_mask=decoder_attention_mask)
    with torch.no_grad():
        ours, theirs = model(**inputs), marian(**inputs)
    assert decoder_attention_mask.sum() < decoder_attention_mask.numel()  # padded rows on both sides
    torch.testing.assert_close(ours.encoder_last_hidden_state, theirs.encoder_last_hidden_state, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.logits, theirs.logits, atol=1e-5, rtol=1e-5)
    assert theirs.logits.std() > 0.1  # not a degenerate comparison


def test_same_beam_search_tokens_as_marian_on_50_sentences(converted):
    marian, _, output, _ = converted
    model, tokenizer = load_model_folder(output)
    batch = tokenizer(sentences(50, tokenizer), padding=True, return_tensors="pt")
    # Both with their own generation config: Marian's, carried over (4 beams, PAD never generated, max_length)
    assert model.generation_config.bad_words_ids == [[model.config.pad_token_id]]
    with torch.no_grad():
        ours, theirs = model.eval().generate(**batch), marian.generate(**batch)
    assert torch.equal(ours, theirs)
    assert len({tuple(row) for row in theirs.tolist()}) > 10  # sentences get different outputs


# ---------------------------------------------------------------------------------------------------------------
# The tokenizer and the command line
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def opus_folders(tmp_path_factory, marian_tokenizer_dir, vocab_size):
    """The OPUS-MT-like model (shared, swish, bias) and its conversion through the command line."""
    root = tmp_path_factory.mktemp("opus")
    marian = marian_model(vocab_size, seed=7)
    marian.final_logits_bias[0, -1] = 8.0  # PAD would be the best token: only bad_words_ids keeps it out
    source = save_marian(root / "opus-mt-en-es", marian, marian_tokenizer_dir)
    status = main(["convert", "--from", "marian", "--model", str(source), "--output_dir", str(root / "converted")])
    assert status == 0
    return marian, source, root / "converted"


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_auto_tokenizer_loads_the_marian_tokenizer_with_the_same_ids(opus_folders):
    _, source, output = opus_folders
    tokenizer, original = AutoTokenizer.from_pretrained(output), marian_tokenizer(source)
    assert isinstance(tokenizer, MarianTokenizer)
    pairs = read_pairs("validation", 200)
    ours = tokenizer([en for en, _ in pairs], text_target=[es for _, es in pairs])
    theirs = original([en for en, _ in pairs], text_target=[es for _, es in pairs])
    assert ours["input_ids"] == theirs["input_ids"] and ours["labels"] == theirs["labels"]
    assert ours["input_ids"] != ours["labels"]  # two sentencepiece models, two languages
    assert tokenizer.unk_token_id not in {i for ids in ours["input_ids"][:20] for i in ids}  # real pieces


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_the_light_marian_tokenizer_encodes_and_decodes_as_marians_does(opus_folders):
    """`load_tokenizer(light=True)` reads a converted model's MarianTokenizer with `sentencepiece` alone: the source
    and target ids, tokens and texts of transformers' MarianTokenizer (loaded from the original folder) on real
    pairs, text outside the corpus, a language code, spaces, and text that spells a special token (answered by
    transformers' tokenizer), without loading it otherwise."""
    from vaswani.light_tokenizers import LightMarianTokenizer
    from vaswani.model_folder import load_tokenizer

    _, source, output = opus_folders
    light, original = load_tokenizer(output, light=True), marian_tokenizer(source)
    assert type(light) is LightMarianTokenizer
    pairs = read_pairs("validation", 300)
    odd = ["", " ", "  two  spaces ", "Ünïcödé 😀 日本 \t x", ">>es<< Open the file.", ">>es<<", "a >> b << c"]
    sources, targets = [en for en, _ in pairs] + odd, [es for _, es in pairs] + odd
    for add in (True, False):
        assert (
            light(sources, add_special_tokens=add)["input_ids"]
            == original(sources, add_special_tokens=add)["input_ids"]
        )
        assert light(sources[3])["input_ids"] == original(sources[3])["input_ids"]
        ours, theirs = (
            light(text_target=targets, add_special_tokens=add),
            original(text_target=targets, add_special_tokens=add),
        )
        assert ours["input_ids"] == theirs["input_ids"]
        ours, theirs = light(sources, text_target=targets), original(sources, text_target=targets)
        assert (ours["input_ids"], ours["labels"]) == (theirs["input_ids"], theirs["labels"])
    assert light._full is None  # all of it by sentencepiece alone
    spelled = ["no <unk> here", "</s>", "x <pad> y"]  # cut around the special tokens: transformers' tokenizer's answer
    assert light(spelled, text_target=spelled[::-1]) == {
        name: ids for name, ids in original(spelled, text_target=spelled[::-1]).items() if name != "attention_mask"
    }
    ids = [*original(text_target=targets)["input_ids"], list(range(len(original)))]  # every id once, specials too
    for skip in (True, False):
        assert [light.decode(i, skip_special_tokens=skip) for i in ids] == [
            original.decode(i, skip_special_tokens=skip) for i in ids
        ]
        assert light.convert_ids_to_tokens(ids[-1], skip_special_tokens=skip) == original.convert_ids_to_tokens(
            ids[-1], skip_special_tokens=skip
        )
    tokens = [*original.convert_ids_to_tokens(ids[-1]), "no-such-token", ">>es<<"]
    assert light.convert_tokens_to_ids(tokens) == original.convert_tokens_to_ids(tokens)
    assert light.convert_tokens_to_ids("no-such-token") == original.convert_tokens_to_ids("no-such-token")
    assert light.convert_ids_to_tokens(5) == original.convert_ids_to_tokens(5)
    for name in ("eos_token", "unk_token", "pad_token", "bos_token", "mask_token"):
        assert (getattr(light, name), getattr(light, f"{name}_id")) == (
            getattr(original, name), getattr(original, f"{name}_id"),
        ), name  # fmt: skip
    assert set(light.all_special_ids) == set(original.all_special_ids) and len(light) == len(original)
    assert light.get_vocab() == original.get_vocab()
    assert type(light._full).__name__ == "MarianTokenizer"  # loaded for the spelled special tokens only
    fresh = load_tokenizer(output, light=True)
    fresh.decode(ids[-1])
    fresh.convert_ids_to_tokens(ids[-1])
    from vaswani.serve.models import token_counter  # `vaswani serve`'s batch budget counts with a copy

    assert token_counter(fresh)(sources) == [len(i) for i in original(sources)["input_ids"]]
    assert fresh._full is None


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
@pytest.mark.parametrize(
    ("config", "file"),
    [
        ({"sp_model_kwargs": {"enable_sampling": True, "alpha": 0.1}}, None),  # random cuts: not ours to make
        ({"do_lower_case": True}, None),  # an entry it does not read
        ({}, ("special_tokens_map.json", {"eos_token": "<eos>"})),
        ({}, ("added_tokens.json", {"<new>": 71})),
    ],
    ids=["sentencepiece-options", "unknown-entry", "other-special-tokens", "added-tokens"],
)
def test_a_marian_folder_the_light_tokenizer_would_read_otherwise_gets_transformers(opus_folders, tmp_path, config,
                                                                                   file):  # fmt: skip
    """Where the folder asks for what `LightMarianTokenizer` does not do, `load_tokenizer(light=True)` gives
    transformers' MarianTokenizer."""
    from vaswani.model_folder import load_tokenizer

    _, _, output = opus_folders
    folder = copy_folder(output, tmp_path / "folder")
    edit = folder / "tokenizer_config.json"
    edit.write_text(json.dumps({**json.loads(edit.read_text(encoding="utf-8")), **config}), encoding="utf-8")
    if file:
        (folder / file[0]).write_text(json.dumps(file[1]), encoding="utf-8")
    assert type(load_tokenizer(output, light=True)).__name__ == "LightMarianTokenizer"
    assert type(load_tokenizer(folder, light=True)).__name__ == "MarianTokenizer"


def test_vaswani_translate_prints_marians_translations(opus_folders, tmp_path, capsys):
    marian, source, output = opus_folders
    tokenizer = marian_tokenizer(source)
    lines = sentences(12, tokenizer)
    (tmp_path / "input.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    capsys.readouterr()
    status = main(["translate", "--model", str(output), "--input", str(tmp_path / "input.txt"), "--no_progress"])
    assert status == 0
    printed = capsys.readouterr().out.splitlines()
    expected = []
    for line in lines:  # sentence by sentence: no padding in the reference
        with torch.no_grad():
            ids = marian.generate(**tokenizer([line], return_tensors="pt"), num_beams=4, length_penalty=0.6)
        expected.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    assert printed == expected
    assert len(set(printed)) > 6 and all(printed)


def short_pairs(tokenizer, count: int) -> list[tuple[str, str]]:
    """Validation pairs whose source and target fit the tiny models' position table."""
    fits = [(en, es) for en, es in read_pairs("validation", 200) if len(tokenizer(en)["input_ids"]) <= MAX_SOURCE_TOKENS
            and len(tokenizer(text_target=es)["input_ids"]) <= MAX_SOURCE_TOKENS]  # fmt: skip
    assert len(fits) >= count
    return fits[:count]


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_vaswani_score_gives_marians_log_probabilities_of_the_target_languages_pieces(opus_folders, tmp_path):
    """`vaswani score` cuts each target with the target language's sentencepiece model, as MarianTokenizer's
    `text_target` (and training) does, and gives MarianMTModel's log-probabilities of those pieces. The source
    language's model cuts Spanish into other pieces, ones the model never learnt to produce."""
    marian, source, output = opus_folders
    tokenizer = marian_tokenizer(source)
    pairs = short_pairs(tokenizer, 8)
    (tmp_path / "source.txt").write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
    (tmp_path / "target.txt").write_text("".join(es + "\n" for _, es in pairs), encoding="utf-8")
    status = main(["score", "--model", str(output), "--source", str(tmp_path / "source.txt"), "--target",
                   str(tmp_path / "target.txt"), "--output", str(tmp_path / "scores.jsonl"), "--output_format",
                   "jsonl"])  # fmt: skip
    assert status == 0
    records = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()]
    for (en, es), record in zip(pairs, records, strict=True):
        batch = tokenizer([en], text_target=[es], return_tensors="pt")
        with torch.no_grad():
            logits = marian(**batch).logits[0]  # teacher-forced on the labels shifted right
        expected = torch.log_softmax(logits, -1).gather(1, batch["labels"][0][:, None]).squeeze(1)
        assert record["tokens"] == tokenizer.convert_ids_to_tokens(batch["labels"][0])
        torch.testing.assert_close(torch.tensor(record["token_log_probs"]), expected, atol=1e-4, rtol=1e-4)
    assert any(tokenizer(es)["input_ids"] != tokenizer(text_target=es)["input_ids"] for _, es in pairs)


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_prefixes_and_constraints_are_cut_into_the_target_languages_pieces(opus_folders, monkeypatch):
    """A prefix and a constraint phrase are Spanish: the decoder is given the target sentencepiece model's pieces
    of them (MarianTokenizer's `text_target`), the pieces it produces itself."""
    from vaswani.inference.engines import TorchEngine
    from vaswani.inference.translator import Translator

    _, source, output = opus_folders
    tokenizer = marian_tokenizer(source)
    (en, es), (_, other) = short_pairs(tokenizer, 2)
    prefix, phrase = " ".join(es.split()[:3]), other.split()[0]
    given = []
    generate = TorchEngine.generate
    monkeypatch.setattr(TorchEngine, "generate", lambda self, sources, **options: given.append(options) or generate(
        self, sources, **options))  # fmt: skip
    translator = Translator(output, device="cpu")
    assert translator.translate([en], prefixes=[prefix], num_beams=2)[0].startswith(prefix)
    translator.translate([en], constraints=[[phrase]], num_beams=2)
    target_pieces = tokenizer(text_target=[prefix, phrase], add_special_tokens=False)["input_ids"]
    assert given[0]["prefixes"] == [target_pieces[0]] and given[1]["constraints"] == [[target_pieces[1]]]
    assert target_pieces != tokenizer([prefix, phrase], add_special_tokens=False)["input_ids"]


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_a_source_encoded_in_one_thread_never_changes_a_target_encoded_in_another(opus_folders, monkeypatch):
    """CTranslate2's workers (and `vaswani serve`'s) call one Translator from several threads. A MarianTokenizer
    encodes a target by switching to its target sentencepiece model, and a source by switching to its source model:
    a source encoded meanwhile in another thread would have the target cut by the English model. Here each target's
    switch is held open until another thread has asked to encode a source (the Translator's own, then the serving
    token counter's); the target still gets the Spanish model's pieces, and the source the English model's."""
    import threading

    from vaswani.inference.translator import Translator
    from vaswani.serve.models import token_counter

    _, source, output = opus_folders
    reference = marian_tokenizer(source)
    (en, es), _ = short_pairs(reference, 2)
    translator = Translator(output, device="cpu")
    counter = token_counter(translator.tokenizer)
    to_target = type(translator.tokenizer)._switch_to_target_mode
    switched, asked = threading.Event(), threading.Event()

    def slow_switch(tokenizer):
        to_target(tokenizer)
        switched.set()
        asked.wait(timeout=5)
        time.sleep(0.2)  # the other thread encodes its source now, or waits for this call to end

    expected_target = reference(text_target=[es])["input_ids"]
    expected_source = reference([en])["input_ids"]
    assert expected_target != reference([es])["input_ids"]  # the two models cut the Spanish differently
    monkeypatch.setattr(type(translator.tokenizer), "_switch_to_target_mode", slow_switch)
    for encode_source in (lambda: translator._encode([en], [0], None)[0], lambda: counter([en])[0]):
        switched.clear()
        asked.clear()
        targets: list = []
        worker = threading.Thread(target=lambda found=targets: found.append(translator._encode_targets([es])))
        worker.start()
        assert switched.wait(timeout=30)
        asked.set()
        encoded = encode_source()
        worker.join()
        assert targets == [expected_target]
        assert encoded in (expected_source[0], len(expected_source[0]))
    # a text longer than the model is counted without transformers' "indexing errors" warning (never decoded as such)
    from transformers import tokenization_utils_base

    warned: list = []
    monkeypatch.setattr(tokenization_utils_base.logger, "warning", lambda message, *args: warned.append(message))
    assert counter([en * 30]) == [len(reference([en * 30], verbose=False)["input_ids"][0])] and warned == []


def test_convert_command_says_where_it_wrote_and_the_card_names_the_source(opus_folders, capsys):
    _, source, output = opus_folders
    card = (output / "README.md").read_text(encoding="utf-8")
    assert "Converted by `vaswani convert --from marian` from:" in card and "license: apache-2.0" in card
    assert "(folder `opus-mt-en-es`; license: not stated in its model card)" in card
    assert str(source.parent) not in card  # the folder's name, never the local path above it
    for name in ("model.safetensors", "config.json", "generation_config.json", "source.spm", "target.spm",
                 "vocab.json", "tokenizer_config.json", "modeling_vaswani.py"):  # fmt: skip
        assert (output / name).is_file(), name
    assert not [p.name for p in output.parent.iterdir() if p.name.startswith(".tmp-")]


def test_a_converted_folder_can_be_pushed_with_its_tokenizer(opus_folders):
    from vaswani.hub.push import check_push_folder, files_to_push

    _, _, output = opus_folders
    pushed = {name for name, _ in files_to_push(check_push_folder(output))}
    assert {"source.spm", "target.spm", "vocab.json", "tokenizer_config.json", "model.safetensors"} <= pushed


def test_the_card_carries_the_source_license(converted):
    _, _, output, _ = converted
    card = (output / "README.md").read_text(encoding="utf-8")
    metadata, body = card.split("---\n")[1:3]
    assert "license: cc-by-4.0" in metadata and "model_name: converted" in metadata
    assert "(folder `opus-mt-en-es`; license: cc-by-4.0)" in body


def test_ctranslate2_export_gives_ctranslate2s_own_marian_greedy_tokens(opus_folders, tmp_path):
    """Our exporter on the converted folder, run by `vaswani translate`'s CTranslate2 engine, against CTranslate2's
    own Marian converter on the original folder (which drops <pad> from the vocabulary where we suppress it)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from vaswani.inference.translator import Translator

    _, source, output = opus_folders
    assert (
        main(["export", "--model", str(output), "--output_dir", str(tmp_path / "ours"), "--format", "ctranslate2"])
        == 0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctranslate2.converters.TransformersConverter(str(source)).convert(str(tmp_path / "theirs"))
    translator = Translator(tmp_path / "ours", device="cpu")
    tokenizer = translator.tokenizer
    sources = [tokenizer(line)["input_ids"] for line in sentences(30, tokenizer)]
    ours = translator.engine.generate(sources, num_beams=1, max_new_tokens=MAX_LENGTH)
    theirs = ctranslate2.Translator(str(tmp_path / "theirs"), device="cpu", intra_threads=1).translate_batch(
        [tokenizer.convert_ids_to_tokens(ids) for ids in sources], beam_size=1, max_decoding_length=MAX_LENGTH
    )
    ours_tokens = [tokenizer.convert_ids_to_tokens(hypotheses[0].ids) for hypotheses in ours]
    assert ours_tokens == [result.hypotheses[0] for result in theirs]
    assert len({tuple(tokens) for tokens in ours_tokens}) > 10


def test_an_export_of_a_converted_model_translates_without_pytorch_or_transformers(opus_folders, tmp_path):
    """`vaswani translate` with the CTranslate2 export of a converted OPUS-MT model reads its MarianTokenizer with
    sentencepiece alone (`LightMarianTokenizer`), not through AutoTokenizer, whose imports take PyTorch's (a
    sentence: 0.3 s instead of 3.2 s), and prints what the same command prints in this process."""
    pytest.importorskip("ctranslate2")
    import os
    import subprocess
    import sys

    from test_ctranslate2 import COMMAND_PROBE

    _, source, output = opus_folders
    export = tmp_path / "ct2"
    assert main(["export", "--model", str(output), "--output_dir", str(export), "--format", "ctranslate2"]) == 0
    lines = sentences(4, marian_tokenizer(source))
    (tmp_path / "input.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    argv = ["translate", "--model", str(export), "--input", str(tmp_path / "input.txt"), "--no_progress"]
    assert main([*argv, "--output", str(tmp_path / "here.txt")]) == 0
    result = subprocess.run([sys.executable, "-c", COMMAND_PROBE, *argv, "--output", str(tmp_path / "there.txt")],
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == "loaded:"
    assert (tmp_path / "there.txt").read_text(encoding="utf-8") == (tmp_path / "here.txt").read_text(encoding="utf-8")
    assert len(set((tmp_path / "here.txt").read_text(encoding="utf-8").splitlines())) == 4
    # the export's own card names the tokenizer it carries: the MarianTokenizer's files, and the source's license
    assert main(["card", "--model", str(export)]) == 0
    card = (export / "README.md").read_text(encoding="utf-8")
    assert "`source.spm`, `target.spm`, `vocab.json`" in card and "library_name: ctranslate2" in card


def test_the_command_is_registered_for_every_converter():
    assert set(CONVERT_FORMATS) == set(CONVERTERS)


# ---------------------------------------------------------------------------------------------------------------
# Weights read safely
# ---------------------------------------------------------------------------------------------------------------
def test_pytorch_model_bin_of_tensors_converts_like_safetensors(opus_folders, tmp_path):
    marian, source, output = opus_folders
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for file in source.iterdir():
        if file.name != "model.safetensors":
            (legacy / file.name).write_bytes(file.read_bytes())
    torch.save(marian.state_dict(), legacy / "pytorch_model.bin")  # every tensor, positions and tied copies included
    convert_marian(legacy, tmp_path / "out")
    expected, actual = load_file(output / "model.safetensors"), load_file(tmp_path / "out" / "model.safetensors")
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def test_an_older_folder_keeps_the_generation_settings_of_its_config_json(opus_folders, tmp_path):
    """Older OPUS-MT folders have no generation_config.json: the settings are in config.json, where
    MarianMTModel.from_pretrained finds them."""
    _, source, _ = opus_folders
    older = copy_folder(source, tmp_path / "older")
    settings = json.loads((older / "generation_config.json").read_text())
    (older / "generation_config.json").unlink()
    edit_config(older, **{k: settings[k] for k in ("bad_words_ids", "max_length", "num_beams", "renormalize_logits")},
                forced_eos_token_id=0)  # fmt: skip
    convert_marian(older, tmp_path / "out")
    ours = GenerationConfig.from_pretrained(tmp_path / "out")
    theirs = MarianMTModel.from_pretrained(older).generation_config
    for name in ("bad_words_ids", "max_length", "num_beams", "renormalize_logits", "forced_eos_token_id",
                 "decoder_start_token_id", "pad_token_id", "eos_token_id"):  # fmt: skip
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.bad_words_ids == [[settings["pad_token_id"]]]


class RunsCode:
    """Unpickling this object would create a file (any callable could be named instead)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def test_a_pickle_with_a_non_tensor_object_is_refused_without_running_it(opus_folders, tmp_path, capsys):
    marian, source, _ = opus_folders
    marker = tmp_path / "ran"
    evil = tmp_path / "evil"
    evil.mkdir()
    for file in source.iterdir():
        if file.name != "model.safetensors":
            (evil / file.name).write_bytes(file.read_bytes())
    torch.save({**marian.state_dict(), "extra": RunsCode(marker)}, evil / "pytorch_model.bin")
    with pytest.raises(ConvertError, match="not a pickle of tensors only"):
        load_pickled_tensors(evil / "pytorch_model.bin")
    status = main(["convert", "--from", "marian", "--model", str(evil), "--output_dir", str(tmp_path / "out")])
    assert status == 2 and "error: " in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out").exists()
    with pytest.raises(pickle.UnpicklingError):  # the check is torch's: a plain torch.load would run it
        torch.load(evil / "pytorch_model.bin", weights_only=True)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------------------
# Bad input and the output folder
# ---------------------------------------------------------------------------------------------------------------
def copy_folder(source: Path, target: Path) -> Path:
    target.mkdir()
    for file in source.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    return target


def edit_config(folder: Path, **changes) -> None:
    values = json.loads((folder / "config.json").read_text())
    values.update(changes)
    (folder / "config.json").write_text(json.dumps(values))


def break_folder(kind: str, source: Path, tmp_path: Path) -> Path:
    if kind == "missing":
        return tmp_path / "nowhere"
    folder = copy_folder(source, tmp_path / kind)
    if kind == "bart":
        edit_config(folder, model_type="bart")
    elif kind == "decoder_vocab_size":
        edit_config(folder, decoder_vocab_size=7)
    elif kind == "activation":
        edit_config(folder, activation_function="swishy")
    elif kind == "no_tokenizer":
        (folder / "target.spm").unlink()
    elif kind == "separate_vocabs":
        values = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "target_vocab.json").write_bytes((folder / "vocab.json").read_bytes())
        values.update(separate_vocabs=True, target_vocab_file="target_vocab.json")
        (folder / "tokenizer_config.json").write_text(json.dumps(values))
    elif kind == "missing_tensor":
        state = load_file(folder / "model.safetensors")
        del state["model.decoder.layers.1.fc2.weight"]
        save_file(state, folder / "model.safetensors")
    elif kind == "extra_layer":
        state = load_file(folder / "model.safetensors")
        state["model.encoder.layers.2.fc1.weight"] = state["model.encoder.layers.1.fc1.weight"].clone()
        save_file(state, folder / "model.safetensors")
    elif kind == "trained_positions":
        state = load_file(folder / "model.safetensors")
        state["model.encoder.embed_positions.weight"] = torch.randn(MAX_POSITIONS, TINY["d_model"])
        save_file(state, folder / "model.safetensors")
    elif kind == "no_weights":
        (folder / "model.safetensors").unlink()
    elif kind == "no_config":
        (folder / "config.json").unlink()
    return folder


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", "no such model folder"),
        ("bart", "model_type='bart'"),
        ("decoder_vocab_size", "decoder_vocab_size=7 differs from vocab_size"),
        ("activation", "activation_function='swishy' is not allowed"),
        ("no_tokenizer", "has no MarianTokenizer (missing target.spm)"),
        ("separate_vocabs", "separate_vocabs=True"),
        ("missing_tensor", "no tensor model.decoder.layers.1.fc2.weight"),
        ("extra_layer", "tensors the conversion does not know: model.encoder.layers.2.fc1.weight"),
        ("trained_positions", "model.encoder.embed_positions.weight is not Marian's sinusoidal position table"),
        ("no_weights", "has no weights: expected model.safetensors or pytorch_model.bin"),
        ("no_config", "is not a model folder (no config.json): give the folder of a MarianMTModel"),
    ],
)
def test_bad_input_is_a_clear_error(opus_folders, tmp_path, capsys, kind, message):
    _, source, _ = opus_folders
    folder = break_folder(kind, source, tmp_path)
    status = main(["convert", "--from", "marian", "--model", str(folder), "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and message in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_an_unknown_source_format_is_refused(opus_folders, tmp_path, capsys):
    _, source, _ = opus_folders
    status = main(["convert", "--from", "opennmt", "--model", str(source), "--output_dir", str(tmp_path / "out")])
    assert status == 2 and "invalid choice: 'opennmt'" in capsys.readouterr().err


def test_an_existing_output_is_never_overwritten(opus_folders, tmp_path, capsys):
    _, source, _ = opus_folders
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    status = main(["convert", "--from", "marian", "--model", str(source), "--output_dir", str(output)])
    assert status == 2 and "error: --output_dir" in capsys.readouterr().err
    assert [p.name for p in output.iterdir()] == ["notes.txt"]
    status = main(["convert", "--from", "marian", "--model", str(source), "--output_dir", str(source)])
    assert status == 2 and "already holds another model" in capsys.readouterr().err


def test_an_interrupted_conversion_leaves_no_folder(opus_folders, tmp_path, monkeypatch):
    import vaswani.convert.marian

    _, source, _ = opus_folders

    def fail(folder, **kwargs):
        assert (folder / "model.safetensors").is_file()  # killed after the weights were written
        raise KeyboardInterrupt

    monkeypatch.setattr(vaswani.convert.marian, "write_model_card", fail)
    with pytest.raises(KeyboardInterrupt):
        convert_marian(source, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------
# The new options on their own
# ---------------------------------------------------------------------------------------------------------------
def test_concatenated_sinusoids_are_marians_table_and_go_on_beyond_it():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    for dim in (16, 17):
        table = MarianSinusoidalPositionalEmbedding(64, dim).create_weight()
        positions = VaswaniConcatenatedSinusoidalPositionalEmbedding(64, dim)
        assert torch.equal(positions(64), table) and torch.equal(positions(10, past_length=54), table[54:])
        longer = MarianSinusoidalPositionalEmbedding(100, dim).create_weight()  # no limit: computed past the table
        torch.testing.assert_close(positions(100, past_length=0)[64:], longer[64:], atol=2e-6, rtol=0)


def test_final_logits_bias_is_added_to_the_logits_and_trained():
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(VaswaniConfig(**TINY, final_logits_bias=True)).eval()
    assert model.lm_head.bias is not None and not model.lm_head.bias.any()  # initialised to zero
    with torch.no_grad():
        model.lm_head.bias.normal_()
    input_ids = torch.tensor([[5, 6, 7, 2]])
    decoder_input_ids = torch.tensor([[1, 8, 9]])
    logits = model(input_ids, decoder_input_ids=decoder_input_ids).logits
    hidden = model.model(input_ids, decoder_input_ids=decoder_input_ids).last_hidden_state
    torch.testing.assert_close(logits, hidden @ model.model.shared.weight.T + model.lm_head.bias)
    loss = model(input_ids, labels=torch.tensor([[8, 9, 2]])).loss
    loss.backward()
    assert model.lm_head.bias.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(sinusoidal_layout="sideways"), "sinusoidal_layout='sideways' is not allowed"),
        (dict(sinusoidal_layout="concatenated", position_embedding_type="learned"), "needs position_embedding_type"),
        (dict(final_logits_bias="yes"), "final_logits_bias='yes' is not allowed"),
        (dict(converted_from="opus"), "converted_from='opus' is not allowed"),
    ],
)
def test_bad_option_values_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        VaswaniConfig(**TINY, **options)


# ---------------------------------------------------------------------------------------------------------------
# Fine-tuning a converted model
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fine_tuning_data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fine-tuning-data")
    for split, count in (("train", 64), ("validation", 8)):
        rows = [{"translation": {"en": en, "es": es}} for en, es in read_pairs(split, count)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def fine_tuning_args(model: Path, data: Path, run: Path, *options: str) -> list[str]:
    return [
        "--model", str(model), "--tokenizer", str(model), "--source_lang", "en", "--target_lang", "es",
        "--train_file", str(data / "train.jsonl"), "--validation_file", str(data / "validation.jsonl"),
        "--output_dir", str(run), "--max_tokens", "400", "--max_source_length", "40", "--max_target_length", "40",
        "--overlong", "truncate", "--warmup_steps", "2", "--eval_steps", "0", "--logging_steps", "1",
        "--max_eval_samples", "4", "--num_beams", "1", "--num_examples", "1", "--report_to", "none",
        "--checkpoint_minutes", "60", "--learning_rate", "1e-3", *options,
    ]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_a_converted_model_fine_tunes_with_its_own_tokenizer(opus_folders, fine_tuning_data, tmp_path):
    from conftest import train_command_in_process
    from transformers import AutoModelForSeq2SeqLM

    _, source, output = opus_folders
    run = tmp_path / "run"
    status, err = train_command_in_process(fine_tuning_args(output, fine_tuning_data, run, "--max_train_steps", "3"))
    assert status == 0, err[-3000:]
    assert not (run / "tokenizer.json").exists() and (run / "source.spm").is_file()  # Marian's, not a new BPE
    tuned = AutoModelForSeq2SeqLM.from_pretrained(run)
    start = AutoModelForSeq2SeqLM.from_pretrained(output)
    assert tuned.config.sinusoidal_layout == "concatenated" and tuned.config.final_logits_bias
    assert tuned.config.converted_from == start.config.converted_from  # the card still names the source
    card = (run / "README.md").read_text(encoding="utf-8")
    assert "fine-tuned as described under Training" in card and "folder `opus-mt-en-es`" in card
    assert "copied unchanged" not in card and "copied unchanged" in (output / "README.md").read_text()
    changed = [name for name, p in tuned.state_dict().items() if not torch.equal(p, start.state_dict()[name])]
    assert "lm_head.bias" in changed and len(changed) > 10
    assert (
        AutoTokenizer.from_pretrained(run)("Hello")["input_ids"]
        == AutoTokenizer.from_pretrained(output)("Hello")["input_ids"]
    )
    # an architecture option does not fit the pretrained weights: a clear error
    status, err = train_command_in_process([
        "--model", str(output), "--tokenizer", str(output), "--source_lang", "en", "--target_lang", "es",
        "--train_file", str(fine_tuning_data / "train.jsonl"), "--validation_size", "0",
        "--output_dir", str(tmp_path / "other"),
        "--d_model", "32",
        "--max_train_steps", "1", "--report_to", "none",
    ])  # fmt: skip
    assert (
        status == 2
        and "error: " in err
        and "was trained with d_model 16; --d_model 32" in err
        and "would not fit" in err
        and "Traceback" not in err
    ), err[-2000:]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_fine_tuning_a_converted_model_resumes_exactly(opus_folders, fine_tuning_data, tmp_path):
    """Stopped after 2 of 4 updates and resumed: the losses and final weights of an uninterrupted run (dropout on)."""
    from conftest import train_command_in_process

    _, _, output = opus_folders
    common = ("--max_train_steps", "4", "--average_checkpoints", "0", "--checkpoint_steps", "2", "--dropout", "0.1")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert train_command_in_process(fine_tuning_args(output, fine_tuning_data, straight, *common))[0] == 0
    status, err = train_command_in_process(
        fine_tuning_args(output, fine_tuning_data, resumed, *common, "--stop_after_steps", "2")
    )
    assert status == 0, err[-3000:]
    assert not (resumed / "model.safetensors").exists()
    status, err = train_command_in_process(
        fine_tuning_args(output, fine_tuning_data, resumed, *common, "--resume_from_checkpoint", "latest")
    )
    assert status == 0, err[-3000:]

    def losses(run):
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [(row["step"], row["loss"]) for row in rows if row["split"] == "train"]

    assert [step for step, _ in losses(resumed)] == [1, 2, 3, 4]  # steps 3 and 4 come after the resume, once
    assert [loss for _, loss in losses(resumed)] == pytest.approx([loss for _, loss in losses(straight)], rel=1e-6)
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-6, msg=key)


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_a_converted_model_prunes_with_its_tokenizer(opus_folders, tmp_path):
    _, _, output = opus_folders
    pruned = tmp_path / "pruned"
    assert main(["prune", "--model", str(output), "--output_dir", str(pruned), "--decoder_layers_to_keep", "1"]) == 0
    model, tokenizer = load_model_folder(pruned)
    assert model.config.decoder_layers == 1 and isinstance(tokenizer, MarianTokenizer)
    assert model.config.converted_from["source"] == "opus-mt-en-es"


def test_an_export_of_a_converted_model_over_an_earlier_export_leaves_nothing_of_it(opus_folders, model_folder,
                                                                                    tmp_path, capsys):  # fmt: skip
    """--overwrite_output_dir over the export of a model trained here (tokenizer.json, run_args.json with its pair):
    the converted OPUS-MT model's export brings a MarianTokenizer and no training record, so the earlier tokenizer.json
    (which made the folder's tokenizer the earlier model's) and run_args.json (which gave the card, `vaswani serve` and
    `distill --teacher` the earlier pair) go: the folder holds what a fresh export writes, the user's file, and the
    earlier card, kept with a warning."""
    pytest.importorskip("ctranslate2")
    _, source, converted = opus_folders
    trained = tmp_path / "trained"
    shutil.copytree(model_folder, trained)
    (trained / "run_args.json").write_text(json.dumps({"source_lang": "de", "target_lang": "fr"}), encoding="utf-8")
    output, fresh = tmp_path / "ct2", tmp_path / "fresh"
    assert main(["export", "--model", str(trained), "--output_dir", str(output)]) == 0
    assert main(["card", "--model", str(output)]) == 0
    card = (output / "README.md").read_text(encoding="utf-8")
    (output / "notes.txt").write_text("mine", encoding="utf-8")
    capsys.readouterr()
    assert main(["export", "--model", str(converted), "--output_dir", str(output), "--overwrite_output_dir"]) == 0
    assert "README.md is the card of the export this one replaced (kept)" in capsys.readouterr().err
    assert main(["export", "--model", str(converted), "--output_dir", str(fresh)]) == 0
    assert sorted(p.name for p in output.iterdir()) == sorted(
        [p.name for p in fresh.iterdir()] + ["README.md", "notes.txt"]
    )
    assert (output / "README.md").read_text(encoding="utf-8") == card and not (output / "run_args.json").exists()
    lines = sentences(4, marian_tokenizer(source))
    (tmp_path / "input.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    for folder in (output, fresh):
        argv = ["translate", "--model", str(folder), "--input", str(tmp_path / "input.txt"), "--no_progress"]
        assert main([*argv, "--output", str(tmp_path / f"{folder.name}.txt")]) == 0
    assert (tmp_path / "ct2.txt").read_text(encoding="utf-8") == (tmp_path / "fresh.txt").read_text(encoding="utf-8")
