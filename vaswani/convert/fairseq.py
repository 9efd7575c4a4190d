"""`vaswani convert --from fairseq --checkpoint model.pt --data_dir DICT_DIR --output_dir OUT`: a fairseq
`TransformerModel` checkpoint and its dictionaries as a Vaswani folder.

It maps the layers as marian.py does (`SourceTensors`, `map_layers`); the differences from the paper are
`sinusoidal_layout="fairseq"` (fairseq's frequencies, positions from padding_idx + 1), learned tables without their
first padding_idx + 1 rows, and fairseq's dictionary ids; docs/pretrained.md has its table. The checkpoint is read
with `torch.load(weights_only=True)`, allowing `argparse.Namespace` only (`FAIRSEQ_SAFE_GLOBALS`).
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import torch

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from tokenization.bpe import PortableTokenizerFast, eos_post_processor
from vaswani.convert.marian import SourceTensors, map_layers
from vaswani.errors import ConvertError
from vaswani.hub.model_card import write_model_card
from vaswani.light_tokenizers import subword_nmt_decoder
from vaswani.model_folder import check_output_folder, check_tokenizer_fits, write_model_folder

# ================================================================================================================
# fairseq: `vaswani convert --from fairseq --checkpoint model.pt --data_dir DICT_DIR --output_dir OUT`
# ================================================================================================================
# The architectures converted: fairseq's `TransformerModel` with the defaults of these names (`base_architecture`,
# `transformer_wmt_en_de`, `transformer_vaswani_wmt_en_de_big`); the checkpoint's args/cfg override them.
FAIRSEQ_ARCHITECTURES = {
    "transformer": {},
    "transformer_wmt_en_de": {},
    "transformer_vaswani_wmt_en_de_big": {
        "encoder_embed_dim": 1024, "encoder_ffn_embed_dim": 4096, "encoder_attention_heads": 16,
        "decoder_embed_dim": 1024, "decoder_ffn_embed_dim": 4096, "decoder_attention_heads": 16, "dropout": 0.3,
    },
}  # fmt: skip


FAIRSEQ_DEFAULTS = {  # fairseq's `base_architecture`
    "encoder_embed_dim": 512, "encoder_ffn_embed_dim": 2048, "encoder_layers": 6, "encoder_attention_heads": 8,
    "decoder_embed_dim": 512, "decoder_ffn_embed_dim": 2048, "decoder_layers": 6, "decoder_attention_heads": 8,
    "encoder_normalize_before": False, "decoder_normalize_before": False, "encoder_learned_pos": False,
    "decoder_learned_pos": False, "share_all_embeddings": False, "share_decoder_input_output_embed": False,
    "no_scale_embedding": False, "activation_fn": "relu", "dropout": 0.1, "attention_dropout": 0.0,
    "activation_dropout": 0.0, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "max_source_positions": 1024,
    "max_target_positions": 1024, "no_decoder_final_norm": False,
}  # fmt: skip


# fairseq options that change the computation in ways a vaswani model does not represent: refused when set
FAIRSEQ_UNSUPPORTED = (
    "layernorm_embedding", "no_token_positional_embeddings", "adaptive_softmax_cutoff", "cross_self_attention",
    "adaptive_input", "tie_adaptive_weights", "quant_noise_pq", "offload_activations",
)  # fmt: skip


FAIRSEQ_ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}  # fairseq's gelu is the exact (erf) one


# fairseq's `Dictionary`: these four first, then the lines of dict.LANG.txt
FAIRSEQ_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>"]


# what a fairseq checkpoint needs beyond tensors and plain containers: its `args` (fairseq < 0.10)
FAIRSEQ_SAFE_GLOBALS = [argparse.Namespace]


OMEGACONF_FIX = (
    "where you trust the file, turn its cfg into a plain dict with fairseq's Python: "
    "c = torch.load(path, weights_only=False); c['cfg'] = omegaconf.OmegaConf.to_container(c['cfg'], resolve=True); "
    "torch.save({'model': c['model'], 'cfg': c['cfg']}, 'plain.pt')"
)


def load_fairseq_checkpoint(path: Path) -> dict:
    """A fairseq checkpoint read with `torch.load(weights_only=True)`, allowing `argparse.Namespace` (the `args` of
    older checkpoints) and nothing else: a pickle naming any other object (omegaconf's DictConfig, a training meter,
    code) is a `ConvertError` before that object is created."""
    if not path.is_file():
        raise ConvertError(f"no such checkpoint file: {path}")
    try:
        with torch.serialization.safe_globals(FAIRSEQ_SAFE_GLOBALS):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError, TypeError) as error:
        text = str(error).strip()
        reason = text.splitlines()[0] if text else type(error).__name__
        if "omegaconf" in text:
            raise ConvertError(
                f"{path} was not loaded: its cfg is an omegaconf DictConfig, which cannot be read without unpickling "
                f"omegaconf's objects (that can run code); {OMEGACONF_FIX}"
            ) from None
        raise ConvertError(
            f"{path} was not loaded: it holds objects other than tensors, plain containers and argparse.Namespace "
            f"({reason}). Unpickling other objects can run code; where you trust the file, keep only its 'model' "
            "and 'args' (or a plain-dict 'cfg') and save it again with torch.save"
        ) from error
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise ConvertError(f"{path} is not a fairseq checkpoint: expected a dict with the state dict under 'model'")
    model = checkpoint["model"]
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in model.items()):
        raise ConvertError(f"{path}: 'model' is not a state dict (a dict of named tensors)")
    return checkpoint


def fairseq_model_args(checkpoint: dict, path: Path) -> dict:
    """The model's hyperparameters: `args` (an argparse.Namespace, fairseq < 0.10) or `cfg["model"]` (a plain dict
    or Namespace), over the defaults of its architecture. An architecture not converted is a `ConvertError`."""
    args, task = checkpoint.get("args"), {}
    if args is None and isinstance(checkpoint.get("cfg"), dict):
        args = checkpoint["cfg"].get("model")
        task = checkpoint["cfg"].get("task")  # where fairseq >= 0.10 keeps source_lang and target_lang
        task = vars(task) if isinstance(task, argparse.Namespace) else task if isinstance(task, dict) else {}
    if isinstance(args, argparse.Namespace):
        args = vars(args)
    if not isinstance(args, dict):
        raise ConvertError(
            f"{path} records no model configuration: expected 'args' (argparse.Namespace) or 'cfg' with a 'model' "
            "entry (a dict)"
        )
    arch = args.get("arch", args.get("_name"))
    if arch not in FAIRSEQ_ARCHITECTURES:
        raise ConvertError(
            f"{path}: arch={arch!r} cannot be converted; allowed: {', '.join(FAIRSEQ_ARCHITECTURES)} (fairseq's "
            "TransformerModel)"
        )
    values = {**FAIRSEQ_DEFAULTS, **FAIRSEQ_ARCHITECTURES[arch]}
    values.update({k: v for k, v in task.items() if k in ("source_lang", "target_lang") and v is not None})
    values.update({k: v for k, v in args.items() if v is not None})
    if "relu_dropout" in args and "activation_dropout" not in args:  # fairseq < 0.7's name
        values["activation_dropout"] = args["relu_dropout"]
    values["arch"] = arch
    return values


def fairseq_vaswani_config(args: dict, vocab_size: int, converted_from: dict | None = None) -> VaswaniConfig:
    """The `VaswaniConfig` computing what fairseq's TransformerModel with `args` computes. A field that cannot be
    represented is a `ConvertError` naming it."""
    for name in FAIRSEQ_UNSUPPORTED:
        if args.get(name) not in (None, False, 0, 0.0, "", "None"):
            raise ConvertError(f"{name}={args[name]!r} cannot be represented (vaswani models have no such option)")
    d_model = args["encoder_embed_dim"]
    for name in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        if args.get(name, d_model) != d_model:
            raise ConvertError(
                f"{name}={args[name]} differs from encoder_embed_dim={d_model}: vaswani models have one width"
            )
    for encoder_name, decoder_name in (
        ("encoder_normalize_before", "decoder_normalize_before"),
        ("encoder_learned_pos", "decoder_learned_pos"),
    ):
        if bool(args[encoder_name]) != bool(args[decoder_name]):
            raise ConvertError(
                f"{encoder_name}={args[encoder_name]} but {decoder_name}={args[decoder_name]}: vaswani models use the "
                "same setting in both stacks"
            )
    pre_norm = bool(args["encoder_normalize_before"])
    if pre_norm and args["no_decoder_final_norm"]:
        raise ConvertError("no_decoder_final_norm=True cannot be represented: PreNorm stacks end with a norm")
    learned = bool(args["encoder_learned_pos"])
    if learned and args["max_source_positions"] != args["max_target_positions"]:
        raise ConvertError(
            f"max_source_positions={args['max_source_positions']} but max_target_positions="
            f"{args['max_target_positions']}: with learned positions vaswani models have one table length"
        )
    activation = FAIRSEQ_ACTIVATIONS.get(args["activation_fn"])
    if activation is None:
        raise ConvertError(
            f"activation_fn={args['activation_fn']!r} cannot be converted; allowed: {', '.join(FAIRSEQ_ACTIVATIONS)}"
        )
    share_all = bool(args["share_all_embeddings"])
    try:
        return VaswaniConfig(
            vocab_size=vocab_size,
            d_model=d_model,
            encoder_layers=args["encoder_layers"],
            decoder_layers=args["decoder_layers"],
            encoder_attention_heads=args["encoder_attention_heads"],
            decoder_attention_heads=args["decoder_attention_heads"],
            encoder_ffn_dim=args["encoder_ffn_embed_dim"],
            decoder_ffn_dim=args["decoder_ffn_embed_dim"],
            activation_function=activation,
            dropout=float(args["dropout"]),
            attention_dropout=float(args["attention_dropout"]),
            activation_dropout=float(args["activation_dropout"]),
            encoder_layerdrop=float(args["encoder_layerdrop"]),
            decoder_layerdrop=float(args["decoder_layerdrop"]),
            max_position_embeddings=max(args["max_source_positions"], args["max_target_positions"]),
            position_embedding_type="learned" if learned else "sinusoidal",
            sinusoidal_layout="interleaved" if learned else "fairseq",
            scale_embedding=not args["no_scale_embedding"],
            share_embeddings=share_all,
            tie_word_embeddings=share_all or bool(args["share_decoder_input_output_embed"]),
            norm_position="pre" if pre_norm else "post",
            norm_type="layernorm",
            layer_norm_eps=1e-5,  # fairseq's LayerNorm
            pad_token_id=FAIRSEQ_PAD,
            bos_token_id=FAIRSEQ_BOS,
            eos_token_id=FAIRSEQ_EOS,
            decoder_start_token_id=FAIRSEQ_EOS,  # fairseq starts decoding with </s>
            converted_from=converted_from,
        )
    except ValueError as error:
        raise ConvertError(f"the fairseq configuration cannot be represented: {error}") from error


def fairseq_vaswani_state_dict(source: dict[str, torch.Tensor], config: VaswaniConfig) -> dict[str, torch.Tensor]:
    """Our parameter names and layouts from a fairseq TransformerModel state dict: q/k/v stacked into our fused
    projections (or fairseq < 0.9's `in_proj_weight`, already stacked), learned position tables without fairseq's
    first padding_idx + 1 rows (positions start there), tied matrices resolved. Every tensor must be used; a missing
    one is a `ConvertError` naming it."""
    tensors = SourceTensors(source, "fairseq checkpoint's weights")
    take = tensors.take
    # fairseq's bookkeeping: version counters and the sinusoids' dummy buffer
    tensors.skip(*(name for name in source if name.endswith((".version", "embed_positions._float_tensor"))))
    state: dict[str, torch.Tensor] = {}
    encoder_embedding = take("encoder.embed_tokens.weight")
    decoder_embedding = take("decoder.embed_tokens.weight")
    if config.share_embeddings:
        if not torch.equal(encoder_embedding, decoder_embedding):
            raise ConvertError("share_all_embeddings=True but the encoder and decoder embeddings differ")
        state["model.shared.weight"] = encoder_embedding
    state["model.encoder.embed_tokens.weight"] = encoder_embedding
    state["model.decoder.embed_tokens.weight"] = decoder_embedding
    if config.tie_word_embeddings:
        tensors.skip("decoder.output_projection.weight")  # the tied matrix, stored again by fairseq >= 0.10
        state["lm_head.weight"] = decoder_embedding
    else:
        state["lm_head.weight"] = take("decoder.output_projection.weight", "decoder.embed_out")

    offset = config.pad_token_id + 1  # fairseq's first position
    for side in ("encoder", "decoder"):
        if config.position_embedding_type == "learned":
            table = take(f"{side}.embed_positions.weight")  # (max_positions + offset, d)
            state[f"model.{side}.embeddings.embed_positions.weight"] = table[offset:]
        if config.norm_position == "pre":
            for kind in ("weight", "bias"):
                state[f"model.{side}.layer_norm.{kind}"] = take(f"{side}.layer_norm.{kind}")
    map_layers(tensors, state, config, prefix="")
    tensors.check_all_used("more layers than its args say, or an option vaswani models do not have")
    return {name: tensor.contiguous() for name, tensor in state.items()}


def read_fairseq_dictionary(path: Path) -> list[str]:
    """The tokens of a fairseq dict.LANG.txt ("token count" per line) in id order, after fairseq's four special
    tokens. A line that is not "token count", or a repeated token, is a `ConvertError` naming the line."""
    if not path.is_file():
        raise ConvertError(f"no such dictionary file: {path}")
    tokens: list[str] = []
    seen = set(FAIRSEQ_SPECIAL_TOKENS)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.rstrip().rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].isdigit() or not parts[0]:
            raise ConvertError(f"{path}, line {number}: expected 'token count', got {line!r}")
        if parts[0] in seen:
            raise ConvertError(f"{path}, line {number}: the token {parts[0]!r} is already in the dictionary")
        seen.add(parts[0])
        tokens.append(parts[0])
    return FAIRSEQ_SPECIAL_TOKENS + tokens


def fairseq_vocabulary(data_dir: Path, args: dict, rows: int) -> list[str]:
    """The one vocabulary of the model: dict.SRC.txt (and dict.TGT.txt, which must hold the same tokens: vaswani
    models have one vocabulary), padded like fairseq pads a dictionary to a multiple of 8 with madeupwordNNNN when
    the embedding has more rows (`rows`)."""
    if not data_dir.is_dir():
        raise ConvertError(f"no such folder: {data_dir} (--data_dir: the folder of fairseq's dict.LANG.txt files)")
    languages = [args.get("source_lang"), args.get("target_lang")]
    if all(isinstance(lang, str) for lang in languages):
        files = [data_dir / f"dict.{lang}.txt" for lang in languages]
    else:  # not recorded: the folder's dictionaries
        files = sorted(data_dir.glob("dict.*.txt"))
        if not files:
            raise ConvertError(f"{data_dir} has no dictionary (dict.LANG.txt)")
    vocabularies = [read_fairseq_dictionary(file) for file in files]
    for file, vocabulary in zip(files[1:], vocabularies[1:], strict=True):
        if vocabulary != vocabularies[0]:
            raise ConvertError(
                f"{file} differs from {files[0]}: separate source and target dictionaries cannot be represented "
                "(vaswani models have one vocabulary; fairseq's --joined-dictionary gives one)"
            )
    vocabulary = vocabularies[0]
    padding = rows - len(vocabulary)
    if 0 < padding < 8 and rows % 8 == 0:  # fairseq's `Dictionary.pad_to_multiple_(8)`
        vocabulary = vocabulary + [f"madeupword{i:04d}" for i in range(padding)]
    if len(vocabulary) != rows:
        raise ConvertError(
            f"{files[0]} gives {len(vocabulary)} tokens (with fairseq's 4 special ones) but the checkpoint's embedding "
            f"has {rows} rows: not the dictionary this model was trained with"
        )
    return vocabulary


def fairseq_tokenizer(vocabulary: list[str], model_max_length: int):
    """A fast tokenizer with fairseq's ids (`vocabulary` in id order) for text already segmented as fairseq reads
    it: pieces separated by spaces, each looked up whole (an unknown piece is <unk>), </s> appended as fairseq's
    `encode_line` appends it. Decoding joins the pieces and undoes the segmentation it can tell from the vocabulary:
    subword-nmt's "@@ " continuation marks are removed, sentencepiece's "▁" becomes a space; other pieces are joined
    by spaces."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({token: i for i, token in enumerate(vocabulary)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if any(token.endswith("@@") for token in vocabulary):  # subword-nmt: "Hel@@ lo" -> "Hello"
        tokenizer.decoder = subword_nmt_decoder()
    elif any(token.startswith("\u2581") for token in vocabulary):  # sentencepiece: "▁Hel lo" -> "Hello"
        tokenizer.decoder = decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    tokenizer.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in FAIRSEQ_SPECIAL_TOKENS]
    )
    tokenizer.post_processor = eos_post_processor(tokenizer)
    return PortableTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        # no bos_token: fairseq's decoder starts with </s>, and sources carry no <s>
        additional_special_tokens=["<s>"],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def convert_fairseq(checkpoint_path: str | Path, data_dir: str | Path, output_dir: str | Path) -> Path:
    """Convert the fairseq Transformer checkpoint `checkpoint_path` with the dictionaries of `data_dir` into a vaswani
    model folder `output_dir` (new or empty), written atomically: weights, config, generation config, tokenizer
    (fairseq's ids, for segmented input) and model card. Returns the folder."""
    path = Path(checkpoint_path)
    output = check_output_folder(output_dir, replace=False, option="--output_dir", overwrite_option=None)
    checkpoint = load_fairseq_checkpoint(path)
    args = fairseq_model_args(checkpoint, path)
    source = checkpoint["model"]
    embedding = source.get("encoder.embed_tokens.weight")
    if embedding is None:
        raise ConvertError(f"the fairseq checkpoint has no tensor encoder.embed_tokens.weight ({path})")
    vocabulary = fairseq_vocabulary(Path(data_dir), args, rows=embedding.shape[0])
    converted_from = {"format": "fairseq", "source": path.name, "model_id": None, "license": None}
    config = fairseq_vaswani_config(args, len(vocabulary), converted_from=converted_from)
    state = fairseq_vaswani_state_dict(source, config)
    tokenizer = fairseq_tokenizer(vocabulary, model_max_length=min(args["max_source_positions"], 1024))
    check_tokenizer_fits(tokenizer, config, where=str(data_dir), exact=True)

    model = VaswaniForConditionalGeneration(config).eval()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:  # shapes that contradict the checkpoint's args
        raise ConvertError(f"the weights in {path} do not fit its args: {error}") from error
    model.generation_config.bad_words_ids = [[FAIRSEQ_PAD]]  # fairseq's beam search never picks <pad>

    def write(staging: Path) -> None:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_model_card(staging, repo_id=output.name)

    return write_model_folder(output, write)


FAIRSEQ_BOS, FAIRSEQ_PAD, FAIRSEQ_EOS, FAIRSEQ_UNK = 0, 1, 2, 3
