"""`vaswani convert --from fairseq`: fairseq-layout checkpoints written here (fairseq's parameter names and `args`,
random weights, d_model 16, 2+2 layers) with their dict.LANG.txt files, converted into vaswani folders. The reference
is fairseq's TransformerModel written out below from fairseq's formulas with torch ops (`make_positions`,
`SinusoidalPositionalEmbedding.get_embedding`, `MultiheadAttention`, the layers' PostNorm/PreNorm residuals): it
reads the fairseq state dict by fairseq's names and never uses the mapping under test. Every bad input is an
`error: ...` line (exit status 2) and the output folder is written atomically, never over an existing one."""

import argparse
import math
import pickle
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani import VaswaniConfig
from modeling_vaswani.modeling_vaswani import VaswaniFairseqSinusoidalPositionalEmbedding
from vaswani.cli import main
from vaswani.convert import convert_fairseq
from vaswani.convert.fairseq import load_fairseq_checkpoint
from vaswani.errors import ConvertError

D, FFN, HEADS, LAYERS, PAD, EOS, UNK = 16, 32, 4, 2, 1, 2, 3
MAX_POSITIONS = 64
# The dictionary: subword-nmt pieces ("@@" marks a piece continued by the next). 4 special + 90 = 94 ids, which
# fairseq pads to 96 with madeupword0000 and madeupword0001.
WORDS = [f"w{i}" for i in range(60)] + [f"p{i}@@" for i in range(30)]
VOCAB = 96


# ---------------------------------------------------------------------------------------------------------------
# The fairseq side: a state dict under fairseq's names, its args, its dictionaries
# ---------------------------------------------------------------------------------------------------------------
def fairseq_args(**changes) -> argparse.Namespace:
    values = dict(
        arch="transformer", encoder_embed_dim=D, decoder_embed_dim=D, encoder_ffn_embed_dim=FFN,
        decoder_ffn_embed_dim=FFN, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS, encoder_normalize_before=False, decoder_normalize_before=False,
        encoder_learned_pos=False, decoder_learned_pos=False, share_all_embeddings=True,
        share_decoder_input_output_embed=True, no_scale_embedding=False, activation_fn="relu", dropout=0.1,
        attention_dropout=0.0, activation_dropout=0.0, max_source_positions=MAX_POSITIONS,
        max_target_positions=MAX_POSITIONS, source_lang="en", target_lang="es", layernorm_embedding=False,
        adaptive_softmax_cutoff=None, no_token_positional_embeddings=False,
    )  # fmt: skip
    values.update(changes)
    return argparse.Namespace(**values)


def fairseq_state_dict(args: argparse.Namespace, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under fairseq's names, as fairseq >= 0.10 saves a TransformerModel (tied matrices stored under
    each name, `version` counters, the sinusoids' `_float_tensor`)."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.3):
        return torch.randn(*shape, generator=generator) * scale

    state: dict[str, torch.Tensor] = {}
    embedding = rand(VOCAB, D, scale=1.0)
    state["encoder.embed_tokens.weight"] = embedding
    state["decoder.embed_tokens.weight"] = embedding if args.share_all_embeddings else rand(VOCAB, D, scale=1.0)
    state["decoder.output_projection.weight"] = (
        state["decoder.embed_tokens.weight"] if args.share_decoder_input_output_embed else rand(VOCAB, D, scale=1.0)
    )
    for side in ("encoder", "decoder"):
        state[f"{side}.version"] = torch.tensor([3.0])
        if args.encoder_learned_pos:  # fairseq's LearnedPositionalEmbedding: max_positions + padding_idx + 1 rows
            state[f"{side}.embed_positions.weight"] = rand(MAX_POSITIONS + PAD + 1, D, scale=1.0)
        else:
            state[f"{side}.embed_positions._float_tensor"] = torch.zeros(1)
        if args.encoder_normalize_before:
            state[f"{side}.layer_norm.weight"] = 1 + rand(D, scale=0.1)
            state[f"{side}.layer_norm.bias"] = rand(D, scale=0.1)
        attentions = ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",)
        for i in range(LAYERS):
            prefix = f"{side}.layers.{i}"
            for attention in attentions:
                for p in ("q", "k", "v", "out"):
                    state[f"{prefix}.{attention}.{p}_proj.weight"] = rand(D, D)
                    state[f"{prefix}.{attention}.{p}_proj.bias"] = rand(D, scale=0.1)
                state[f"{prefix}.{attention}_layer_norm.weight"] = 1 + rand(D, scale=0.1)
                state[f"{prefix}.{attention}_layer_norm.bias"] = rand(D, scale=0.1)
            state[f"{prefix}.fc1.weight"], state[f"{prefix}.fc1.bias"] = rand(FFN, D), rand(FFN, scale=0.1)
            state[f"{prefix}.fc2.weight"], state[f"{prefix}.fc2.bias"] = rand(D, FFN), rand(D, scale=0.1)
            state[f"{prefix}.final_layer_norm.weight"] = 1 + rand(D, scale=0.1)
            state[f"{prefix}.final_layer_norm.bias"] = rand(D, scale=0.1)
    return state


def write_dictionaries(folder: Path, languages=("en", "es")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for lang in languages:
        (folder / f"dict.{lang}.txt").write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(WORDS)))
    return folder


def write_checkpoint(path: Path, args: argparse.Namespace, state=None, *, plain_cfg: bool = False, **extra) -> Path:
    state = fairseq_state_dict(args) if state is None else state
    if plain_cfg:  # fairseq >= 0.10 with the cfg saved as a plain dict (OmegaConf.to_container)
        languages = ("source_lang", "target_lang")
        model_cfg = {("_name" if k == "arch" else k): v for k, v in vars(args).items() if k not in languages}
        task = {"_name": "translation", **{k: getattr(args, k) for k in languages}}
        checkpoint = {"cfg": {"model": model_cfg, "task": task}, "model": state}
    else:  # fairseq < 0.10: an argparse.Namespace, with the training state around the model
        checkpoint = {"args": args, "model": state, "optimizer_history": [{"num_updates": 10}], "extra_state": {}}
    checkpoint.update(extra)
    torch.save(checkpoint, path)
    return path


# ---------------------------------------------------------------------------------------------------------------
# The reference: fairseq's TransformerModel from its formulas, on fairseq's names
# ---------------------------------------------------------------------------------------------------------------
def fairseq_sinusoids(num_embeddings: int, dim: int, padding_idx: int) -> torch.Tensor:
    """fairseq's `SinusoidalPositionalEmbedding.get_embedding`."""
    half_dim = dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    if dim % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
    emb[padding_idx, :] = 0
    return emb


def make_positions(tokens: torch.Tensor) -> torch.Tensor:
    """fairseq's `utils.make_positions`: non-pad tokens count from padding_idx + 1, pads get padding_idx."""
    mask = tokens.ne(PAD).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + PAD


def reference_logits(state, args, src: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """fairseq's TransformerModel(src_tokens, prev_output_tokens) -> logits (B, T, V), eval mode."""
    act = F.relu if args.activation_fn == "relu" else F.gelu
    scale = 1.0 if args.no_scale_embedding else math.sqrt(D)
    pre = args.encoder_normalize_before

    def ln(x, name):
        return F.layer_norm(x, (D,), state[f"{name}.weight"], state[f"{name}.bias"], eps=1e-5)

    def linear(x, name):
        return F.linear(x, state[f"{name}.weight"], state[f"{name}.bias"])

    def mha(name, query, key, mask):  # fairseq's MultiheadAttention; mask (B, 1 or Tq, Tk) True = blocked
        b, tq, hd = query.shape[0], query.shape[1], D // HEADS
        q = linear(query, f"{name}.q_proj") * hd**-0.5
        k, v = linear(key, f"{name}.k_proj"), linear(key, f"{name}.v_proj")
        q, k, v = (t.view(b, -1, HEADS, hd).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)).masked_fill(mask[:, None], float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, tq, D)
        return linear(out, f"{name}.out_proj")

    def sublayer(x, norm, run):
        y = run(ln(x, norm) if pre else x)
        return x + y if pre else ln(x + y, norm)

    def embed(side, tokens):
        positions = make_positions(tokens)
        if args.encoder_learned_pos:
            table = state[f"{side}.embed_positions.weight"]
        else:
            table = fairseq_sinusoids(MAX_POSITIONS + PAD + 1, D, PAD)
        return scale * F.embedding(tokens, state[f"{side}.embed_tokens.weight"]) + table[positions]

    src_pad = src.eq(PAD)[:, None, :]  # (B, 1, S)
    x = embed("encoder", src)
    for i in range(LAYERS):
        p = f"encoder.layers.{i}"
        x = sublayer(x, f"{p}.self_attn_layer_norm", lambda h, p=p: mha(f"{p}.self_attn", h, h, src_pad))
        x = sublayer(x, f"{p}.final_layer_norm", lambda h, p=p: linear(act(linear(h, f"{p}.fc1")), f"{p}.fc2"))
    memory = ln(x, "encoder.layer_norm") if pre else x

    t = prev.shape[1]
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)[None]  # (1, T, T)
    y = embed("decoder", prev)
    for i in range(LAYERS):
        p = f"decoder.layers.{i}"
        y = sublayer(y, f"{p}.self_attn_layer_norm", lambda h, p=p: mha(f"{p}.self_attn", h, h, causal))
        y = sublayer(y, f"{p}.encoder_attn_layer_norm", lambda h, p=p: mha(f"{p}.encoder_attn", h, memory, src_pad))
        y = sublayer(y, f"{p}.final_layer_norm", lambda h, p=p: linear(act(linear(h, f"{p}.fc1")), f"{p}.fc2"))
    if pre:
        y = ln(y, "decoder.layer_norm")
    return F.linear(y, state["decoder.output_projection.weight"])


def reference_greedy(state, args, src: torch.Tensor, steps: int) -> list[int]:
    """fairseq's greedy search for one sentence: start with </s>, never <pad>, stop after </s>."""
    prev = torch.tensor([[EOS]])
    for _ in range(steps):
        logits = reference_logits(state, args, src, prev)[0, -1]
        logits[PAD] = float("-inf")
        prev = torch.cat([prev, logits.argmax().view(1, 1)], dim=1)
        if prev[0, -1] == EOS:
            break
    return prev[0, 1:].tolist()


def batch(seed: int = 0):
    """A right-padded source batch (ending in </s>, as fairseq's encode_line) and decoder inputs starting with </s>."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (3, 9), generator=generator)
    for row, length in enumerate((9, 6, 3)):
        src[row, length - 1] = EOS
        src[row, length:] = PAD
    prev = torch.randint(4, VOCAB, (3, 7), generator=generator)
    prev[:, 0] = EOS
    return src, prev


# ---------------------------------------------------------------------------------------------------------------
# The conversion gives fairseq's logits
# ---------------------------------------------------------------------------------------------------------------
VARIANTS = {
    "postnorm-shared-sinusoidal": dict(),
    "prenorm-shared-sinusoidal": dict(encoder_normalize_before=True, decoder_normalize_before=True),
    "postnorm-separate-tied-output": dict(share_all_embeddings=False),
    "prenorm-separate-untied-learned-gelu": dict(
        encoder_normalize_before=True, decoder_normalize_before=True, share_all_embeddings=False,
        share_decoder_input_output_embed=False, encoder_learned_pos=True, decoder_learned_pos=True,
        activation_fn="gelu", no_scale_embedding=True,
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    "variant, plain_cfg",
    [(name, False) for name in sorted(VARIANTS)] + [("prenorm-separate-untied-learned-gelu", True)],
    ids=[*sorted(VARIANTS), "cfg-prenorm-separate-untied-learned-gelu"],
)
def test_same_logits_as_fairseq(variant, plain_cfg, tmp_path):
    """Through `args` (argparse.Namespace, fairseq < 0.10) and a plain-dict `cfg` (fairseq >= 0.10)."""
    args = fairseq_args(**VARIANTS[variant])
    state = fairseq_state_dict(args)
    checkpoint = write_checkpoint(tmp_path / "model.pt", args, state, plain_cfg=plain_cfg)
    data = write_dictionaries(tmp_path / "data")
    (data / "dict.fr.txt").write_text("other 1\n")  # another pair's: the checkpoint's languages pick en and es
    output = convert_fairseq(checkpoint, data, tmp_path / "out")
    model = AutoModelForSeq2SeqLM.from_pretrained(output).eval()
    src, prev = batch()
    with torch.no_grad():
        ours = model(input_ids=src, attention_mask=src.ne(PAD).long(), decoder_input_ids=prev).logits
    expected = reference_logits(state, args, src, prev)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    config = model.config
    assert config.norm_position == ("pre" if args.encoder_normalize_before else "post")
    assert config.share_embeddings == args.share_all_embeddings
    assert config.tie_word_embeddings == args.share_decoder_input_output_embed
    assert config.position_embedding_type == ("learned" if args.encoder_learned_pos else "sinusoidal")


def test_the_position_offset_is_fairseqs():
    """Position p of a sequence is fairseq's row p + padding_idx + 1 (the table of `make_positions`), not row p."""
    table = fairseq_sinusoids(40, D, PAD)
    positions = VaswaniFairseqSinusoidalPositionalEmbedding(32, D, padding_idx=PAD)
    assert torch.equal(positions(20), table[PAD + 1 : PAD + 21])
    assert torch.equal(positions(5, past_length=10), table[PAD + 11 : PAD + 16])
    assert not torch.allclose(positions(20), table[:20], atol=1e-3)
    # odd widths end in a zero column, as fairseq's
    odd = VaswaniFairseqSinusoidalPositionalEmbedding(8, 17, padding_idx=PAD)(8)
    assert torch.equal(odd, fairseq_sinusoids(12, 17, PAD)[PAD + 1 : PAD + 9])
    # fairseq's frequencies are not the paper's: the concatenated layout (Marian's) gives other numbers
    marian = VaswaniConfig(d_model=D, sinusoidal_layout="concatenated")
    assert marian.sinusoidal_layout != "fairseq"
    from modeling_vaswani.modeling_vaswani import concatenated_sinusoid_table

    assert not torch.allclose(concatenated_sinusoid_table(40, D)[PAD + 1 : PAD + 21], positions(20), atol=1e-3)


def test_a_wrong_position_offset_changes_the_logits(tmp_path):
    """The logits test can fail on the offset: shifting the positions by one gives other logits."""
    args = fairseq_args()
    state = fairseq_state_dict(args)
    output = convert_fairseq(write_checkpoint(tmp_path / "m.pt", args, state), write_dictionaries(tmp_path / "d"),
                             tmp_path / "out")  # fmt: skip
    model = AutoModelForSeq2SeqLM.from_pretrained(output).eval()
    model.model.encoder.embeddings.embed_positions.offset = PAD  # one less than fairseq's
    src, prev = batch()
    with torch.no_grad():
        shifted = model(input_ids=src, attention_mask=src.ne(PAD).long(), decoder_input_ids=prev).logits
    assert not torch.allclose(shifted, reference_logits(state, args, src, prev), atol=1e-3)


def test_greedy_generation_starts_with_eos_and_gives_fairseqs_tokens(tmp_path):
    args = fairseq_args(encoder_normalize_before=True, decoder_normalize_before=True)
    state = fairseq_state_dict(args, seed=3)
    output = convert_fairseq(write_checkpoint(tmp_path / "m.pt", args, state), write_dictionaries(tmp_path / "d"),
                             tmp_path / "out")  # fmt: skip
    model = AutoModelForSeq2SeqLM.from_pretrained(output).eval()
    assert model.generation_config.decoder_start_token_id == EOS and model.generation_config.bad_words_ids == [[PAD]]
    src, _ = batch(seed=1)
    for row in src:
        sentence = row[row.ne(PAD)][None]
        with torch.no_grad():
            ours = model.generate(sentence, num_beams=1, do_sample=False, max_new_tokens=12, length_penalty=1.0)
        assert ours[0, 0] == EOS
        expected = reference_greedy(state, args, sentence, steps=12)
        assert ours[0, 1:].tolist()[: len(expected)] == expected


# ---------------------------------------------------------------------------------------------------------------
# The tokenizer: fairseq's ids for segmented text
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fairseq")
    checkpoint = write_checkpoint(folder / "checkpoint_best.pt", fairseq_args())
    return convert_fairseq(checkpoint, write_dictionaries(folder / "data"), folder / "out")


def test_the_tokenizer_has_fairseqs_ids_and_special_tokens(converted):
    tokenizer = AutoTokenizer.from_pretrained(converted)
    config = VaswaniConfig.from_pretrained(converted)
    assert [tokenizer.convert_ids_to_tokens(i) for i in range(4)] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (PAD, EOS, UNK)
    assert (config.bos_token_id, config.pad_token_id, config.eos_token_id, config.decoder_start_token_id) == (
        0,
        1,
        2,
        2,
    )
    assert len(tokenizer) == config.vocab_size == VOCAB
    assert tokenizer.convert_ids_to_tokens([94, 95]) == ["madeupword0000", "madeupword0001"]
    # dict line i is id i + 4; </s> appended as fairseq's encode_line; an unknown piece is <unk>
    ids = tokenizer("w0 p3@@ w7 nope")["input_ids"]
    assert ids == [4, 4 + WORDS.index("p3@@"), 4 + 7, UNK, EOS]
    assert tokenizer.decode(ids[:3], skip_special_tokens=True) == "w0 p3w7"  # subword-nmt's "@@ " removed


def test_vaswani_translate_prints_the_models_translations(converted, tmp_path, capsys):
    lines = ["w1 w2 p4@@ w5", "w10 w11", "p0@@ p1@@ w3 w30 w40"]
    (tmp_path / "input.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    capsys.readouterr()
    status = main(["translate", "--model", str(converted), "--input", str(tmp_path / "input.txt"), "--no_progress",
                   "--num_beams", "1", "--length_penalty", "1.0", "--max_new_tokens", "8"])  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out.splitlines()
    model = AutoModelForSeq2SeqLM.from_pretrained(converted).eval()
    tokenizer = AutoTokenizer.from_pretrained(converted)
    expected = []
    for line in lines:
        with torch.no_grad():
            ids = model.generate(**tokenizer([line], return_tensors="pt"), num_beams=1, do_sample=False,
                                 max_new_tokens=8)  # fmt: skip
        expected.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    assert printed == expected and all(printed)
    assert not any("@@" in line for line in printed)


def test_the_card_and_config_name_the_source(converted, capsys):
    config = VaswaniConfig.from_pretrained(converted)
    assert config.converted_from == {"format": "fairseq", "source": "checkpoint_best.pt", "model_id": None,
                                     "license": None}  # fmt: skip
    assert config.sinusoidal_layout == "fairseq"
    card = (converted / "README.md").read_text(encoding="utf-8")
    assert "Converted by `vaswani convert --from fairseq` from:\n`checkpoint_best.pt` (a fairseq checkpoint" in card
    assert "subword (fairseq's dictionary)" in card and "license: apache-2.0" in card
    assert str(converted.parent) not in card  # the file's name, never the local path above it


# ---------------------------------------------------------------------------------------------------------------
# Loading safely
# ---------------------------------------------------------------------------------------------------------------
class RunsCode:
    """Unpickling this object would create a file (any callable could be named instead)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def test_a_pickled_object_is_refused_without_running_it(tmp_path, capsys):
    marker = tmp_path / "ran"
    checkpoint = write_checkpoint(tmp_path / "evil.pt", fairseq_args(), extra_state={"meter": RunsCode(marker)})
    with pytest.raises(ConvertError, match="holds objects other than tensors, plain containers and argparse"):
        load_fairseq_checkpoint(checkpoint)
    status = main(["convert", "--from", "fairseq", "--checkpoint", str(checkpoint), "--data_dir",
                   str(write_dictionaries(tmp_path / "data")), "--output_dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and "Traceback" not in err
    assert not marker.exists() and not (tmp_path / "out").exists()
    with pytest.raises(pickle.UnpicklingError):  # the check is torch's: a plain torch.load would run it
        torch.load(checkpoint, weights_only=True)
    assert not marker.exists()


def test_an_omegaconf_cfg_is_refused_with_the_way_out(tmp_path, monkeypatch):
    """fairseq >= 0.10 pickles its cfg as omegaconf's DictConfig; unpickling it would build omegaconf objects."""
    module = types.ModuleType("omegaconf.dictconfig")

    class DictConfig(dict):
        pass

    DictConfig.__module__, DictConfig.__qualname__ = "omegaconf.dictconfig", "DictConfig"
    module.DictConfig = DictConfig
    package = types.ModuleType("omegaconf")
    package.dictconfig = module
    monkeypatch.setitem(sys.modules, "omegaconf", package)
    monkeypatch.setitem(sys.modules, "omegaconf.dictconfig", module)
    path = tmp_path / "model.pt"
    torch.save({"cfg": DictConfig(model={"_name": "transformer"}), "model": fairseq_state_dict(fairseq_args())}, path)
    monkeypatch.delitem(sys.modules, "omegaconf.dictconfig")
    monkeypatch.delitem(sys.modules, "omegaconf")
    with pytest.raises(ConvertError, match="omegaconf DictConfig.*OmegaConf.to_container"):
        load_fairseq_checkpoint(path)


# ---------------------------------------------------------------------------------------------------------------
# Bad input and the output folder
# ---------------------------------------------------------------------------------------------------------------
def broken(kind: str, tmp_path: Path) -> tuple[Path, Path]:
    args, data = fairseq_args(), write_dictionaries(tmp_path / "data")
    state = fairseq_state_dict(args)
    path = tmp_path / "model.pt"
    if kind == "missing":
        return tmp_path / "nowhere.pt", data
    if kind == "arch":
        args.arch = "lstm"
    elif kind == "mixed_norm":
        args.decoder_normalize_before = True
    elif kind == "activation":
        args.activation_fn = "tanh"
    elif kind == "layernorm_embedding":
        args.layernorm_embedding = True
    elif kind == "separate_dictionaries":
        (data / "dict.es.txt").write_text("other 5\n" + (data / "dict.es.txt").read_text())
    elif kind == "dictionary_size":
        (data / "dict.en.txt").write_text("".join(f"{w} 1\n" for w in WORDS[:50]))
        (data / "dict.es.txt").write_text((data / "dict.en.txt").read_text())
    elif kind == "bad_line":
        (data / "dict.en.txt").write_text("w0 12\nnocount\n")
    elif kind == "no_data_dir":
        data = tmp_path / "nodata"
    elif kind == "missing_tensor":
        del state["decoder.layers.1.fc2.weight"]
    elif kind == "extra_layer":
        state["encoder.layers.2.fc1.weight"] = state["encoder.layers.1.fc1.weight"].clone()
    elif kind == "not_a_checkpoint":
        torch.save({"weights": state}, path)
        return path, data
    write_checkpoint(path, args, state)
    return path, data


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", "no such checkpoint file"),
        ("arch", "arch='lstm' cannot be converted; allowed: transformer, transformer_wmt_en_de"),
        ("mixed_norm", "encoder_normalize_before=False but decoder_normalize_before=True"),
        ("activation", "activation_fn='tanh' cannot be converted; allowed: relu, gelu"),
        ("layernorm_embedding", "layernorm_embedding=True cannot be represented"),
        ("separate_dictionaries", "dict.es.txt differs from"),
        ("dictionary_size", "gives 54 tokens (with fairseq's 4 special ones) but the checkpoint's embedding has 96"),
        ("bad_line", "dict.en.txt, line 2: expected 'token count'"),
        ("no_data_dir", "no such folder"),
        ("missing_tensor", "no tensor decoder.layers.1.fc2.weight"),
        ("extra_layer", "tensors the conversion does not know: encoder.layers.2.fc1.weight"),
        ("not_a_checkpoint", "is not a fairseq checkpoint"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path, capsys, kind, message):
    checkpoint, data = broken(kind, tmp_path)
    argv = ["convert", "--from", "fairseq", "--checkpoint", str(checkpoint), "--data_dir", str(data)]
    status = main([*argv, "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and message in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--from", "fairseq", "--checkpoint", "m.pt"], "--from fairseq needs --data_dir"),
        (["--from", "fairseq", "--model", "x", "--checkpoint", "m.pt", "--data_dir", "d"], "does not take --model"),
        (["--from", "marian", "--model", "x", "--checkpoint", "m.pt"], "--from marian does not take --checkpoint"),
    ],
)
def test_options_of_the_other_format_are_refused(tmp_path, capsys, options, message):
    status = main(["convert", *options, "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and message in err, err


def test_an_existing_output_is_never_overwritten(tmp_path, capsys):
    checkpoint = write_checkpoint(tmp_path / "model.pt", fairseq_args())
    data = write_dictionaries(tmp_path / "data")
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    argv = ["convert", "--from", "fairseq", "--checkpoint", str(checkpoint), "--data_dir", str(data)]
    assert main([*argv, "--output_dir", str(output)]) == 2 and "error: --output_dir" in capsys.readouterr().err
    assert [p.name for p in output.iterdir()] == ["notes.txt"]


def test_an_interrupted_conversion_leaves_no_folder(tmp_path, monkeypatch):
    import vaswani.convert.fairseq

    checkpoint = write_checkpoint(tmp_path / "model.pt", fairseq_args())
    data = write_dictionaries(tmp_path / "data")

    def fail(folder, **kwargs):
        assert (folder / "model.safetensors").is_file()  # killed after the weights were written
        raise KeyboardInterrupt

    monkeypatch.setattr(vaswani.convert.fairseq, "write_model_card", fail)
    with pytest.raises(KeyboardInterrupt):
        convert_fairseq(checkpoint, data, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "model.pt"]


def test_fairseq_layout_needs_a_width_of_four():
    from modeling_vaswani import VaswaniDecoderConfig

    with pytest.raises(ValueError, match="sinusoidal_layout='fairseq' needs d_model >= 4"):
        VaswaniConfig(d_model=2, encoder_attention_heads=1, decoder_attention_heads=1, sinusoidal_layout="fairseq")
    with pytest.raises(ValueError, match="sinusoidal_layout='fairseq' needs d_model >= 4"):
        VaswaniDecoderConfig(d_model=2, decoder_attention_heads=1, sinusoidal_layout="fairseq")
    VaswaniConfig(d_model=4, encoder_attention_heads=1, decoder_attention_heads=1, sinusoidal_layout="fairseq")


@pytest.mark.parametrize(
    "pieces, text",
    [
        (["Hel@@", "lo", "world", "."], "Hello world ."),  # subword-nmt: "@@ " removed, as fairseq's --remove-bpe
        (["\u2581Hel", "lo", "\u2581world", "."], "Hello world."),  # sentencepiece: "▁" is a space
        (["Hello", "world", "."], "Hello world ."),  # whole words: joined by spaces
    ],
)
def test_the_tokenizer_undoes_the_segmentation_its_dictionary_shows(pieces, text):
    from vaswani.convert.fairseq import FAIRSEQ_SPECIAL_TOKENS, fairseq_tokenizer

    tokenizer = fairseq_tokenizer(FAIRSEQ_SPECIAL_TOKENS + pieces, model_max_length=64)
    ids = tokenizer(" ".join(pieces))["input_ids"]
    assert ids == [*range(4, 4 + len(pieces)), EOS]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    # an output of nothing but special tokens (<unk> alone, say) is "", not a panic of tokenizers' Strip decoder
    assert (
        tokenizer.decode([UNK, EOS], skip_special_tokens=True) == tokenizer.decode([], skip_special_tokens=True) == ""
    )


def test_a_folder_converted_with_the_old_subword_nmt_decoder_decodes_the_same_and_nothing_without_a_panic(tmp_path):
    """Folders converted before wrote tokenizers' Strip(" ", 0, 1), which panics on an empty output: `load_tokenizer`
    (both kinds) swaps it for `subword_nmt_decoder` in memory, which decodes every other output as it did."""
    import json
    import random

    from tokenizers import Regex, Tokenizer, decoders

    from vaswani.convert.fairseq import FAIRSEQ_SPECIAL_TOKENS, fairseq_tokenizer
    from vaswani.light_tokenizers import PANICKING_SUBWORD_NMT_DECODER
    from vaswani.model_folder import load_tokenizer

    tokenizer = fairseq_tokenizer(FAIRSEQ_SPECIAL_TOKENS + WORDS, model_max_length=64)
    old = decoders.Sequence([decoders.Replace(Regex("$"), " "), decoders.Replace("@@ ", ""), decoders.Fuse(),
                             decoders.Strip(" ", 0, 1)])  # fmt: skip
    assert json.loads(old.__getstate__()) == PANICKING_SUBWORD_NMT_DECODER  # what such a folder holds
    tokenizer.backend_tokenizer.decoder = old
    tokenizer.save_pretrained(tmp_path / "old")
    saved = Tokenizer.from_file(str(tmp_path / "old" / "tokenizer.json"))
    with pytest.raises(BaseException, match="index out of bounds"):  # pyo3's PanicException
        saved.decode([UNK], skip_special_tokens=True)
    rng = random.Random(0)
    outputs = [[rng.randrange(4, 4 + len(WORDS)) for _ in range(rng.randrange(1, 9))] for _ in range(300)]
    for light in (True, False):
        loaded = load_tokenizer(tmp_path / "old", light=light)
        assert loaded.decode([UNK, EOS], skip_special_tokens=True) == ""
        # batch_decode: LightTokenizer's fallback to transformers' tokenizer, which is mended as well
        assert loaded.batch_decode([[UNK, EOS]], skip_special_tokens=True) == [""]
        assert [loaded.decode([*ids, EOS], skip_special_tokens=True) for ids in outputs] == [
            saved.decode([*ids, EOS], skip_special_tokens=True) for ids in outputs
        ]
