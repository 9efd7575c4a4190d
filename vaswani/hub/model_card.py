"""Model cards for trained Vaswani models, rendered from `vaswani/hub/templates/translation.md` with huggingface_hub.

The card's metadata (`ModelCardData`) carries the language pair, license, datasets, `pipeline_tag: translation`,
`library_name: transformers` and a model-index with BLEU and chrF (with the SacreBLEU signatures). The body lists the
architecture, every option that differs from the paper, the results, the training record, how to load the model
(installed package, `trust_remote_code=True`, pipeline) and its intended use and limitations.

Everything comes from files in the model folder: config.json, and where train.py wrote them, run_args.json (how the
model was trained) and results.json (scores). `render_model_card(folder)` therefore works for any saved folder. A
CTranslate2 export (`vaswani export --format ctranslate2`) gets the card of `templates/ctranslate2.md`
(`render_export_card`: `library_name: ctranslate2`, its quantization, how to run it). `with_evaluation` puts the
scores of `vaswani evaluate --output` in either.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from modeling_vaswani import VaswaniConfig
from modeling_vaswani.configuration_vaswani import ARCHITECTURE_OPTIONS
from vaswani.constants import (
    CONFIG_FILE,
    DECODER_MODEL_TYPE,
    ENCODER_MODEL_TYPE,
    EXPORT_INFO_FILE,
    MARIAN_TOKENIZER_FILES,
    MODEL_CARD_FILE,
    RESULTS_FILE,
    RUN_ARGS_FILE,
)
from vaswani.data.cleaning import CLEANING_OPTIONS, PairFilter
from vaswani.fileio import read_json_object, write_file_atomically
from vaswani.inference.translator import target_languages_of
from vaswani.model_folder import has_tokenizer, load_tokenizer
from vaswani.training.checkpoints import step_of

TRANSLATION_TEMPLATE = Path(__file__).resolve().parent / "templates" / "translation.md"  # package data
LANGUAGE_MODEL_TEMPLATE = TRANSLATION_TEMPLATE.with_name("language_model.md")
CTRANSLATE2_TEMPLATE = TRANSLATION_TEMPLATE.with_name("ctranslate2.md")  # a `vaswani export --format ctranslate2`
# What a CTranslate2 export's architecture is, by the class it was exported from (vaswani_ctranslate2.json).
EXPORTED_ARCHITECTURES = {"VaswaniForConditionalGeneration": ("encoder-decoder Transformer", ("encoder", "decoder")),
                          "VaswaniForCausalLM": ("decoder-only Transformer", ("decoder",)),
                          "VaswaniForMaskedLM": ("encoder-only Transformer", ("encoder",))}  # fmt: skip
# The one-stack models of `vaswani train --task causal_lm|masked_lm`, by config.json's model_type.
LANGUAGE_MODELS = {
    DECODER_MODEL_TYPE: {"task": "causal_lm", "stack": "decoder", "pipeline_tag": "text-generation",
                        "description": "A causal (next-token) language model", "accuracy_name": "next-token accuracy",
                        "usage": 'generate = pipeline("text-generation", model="{repo_id}")\n'
                                 'print(generate("The", max_new_tokens=20, add_special_tokens=False))'},
    ENCODER_MODEL_TYPE: {"task": "masked_lm", "stack": "encoder", "pipeline_tag": "fill-mask",
                        "description": "A masked language model (BERT's objective)",
                        "accuracy_name": "masked-token accuracy",
                        "usage": 'fill = pipeline("fill-mask", model="{repo_id}")\nprint(fill("The <mask> is here."))'},
}  # fmt: skip

LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
    "nl": "Dutch", "ru": "Russian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "ar": "Arabic", "cs": "Czech",
    "ro": "Romanian", "tr": "Turkish", "vi": "Vietnamese", "fi": "Finnish", "et": "Estonian", "lv": "Latvian",
}  # fmt: skip

# Options of train.py that name local files or folders: a published card or run_args.json shows their last part only
# (`public_run_args`), never the trainer's directory layout.
LOCAL_PATH_OPTIONS = (
    "config", "train_file", "validation_file", "test_file", "prepared_data", "tokenizer", "model", "output_dir",
    "cache_dir", "resume_from_checkpoint",
    "model_name_or_path",  # --model's name in the run_args.json of older versions
)  # fmt: skip

DEFAULT_INTENDED_USE = (
    "Research and teaching: a faithful reproduction of the paper's model and recipe, a baseline for translation "
    "experiments, and a starting point for fine-tuning on the same language pair."
)


def render_model_card(
    model_dir: str | Path,
    *,
    repo_id: str | None = None,
    license: str | None = None,
    intended_use: str | None = None,
    results: dict | None = None,
    run_args: dict | None = None,
    evaluation: dict | None = None,
) -> ModelCard:
    """The card of the model saved in `model_dir`. `results` / `run_args` default to the folder's results.json /
    run_args.json (written by train.py); `repo_id` is the Hub name used in the code examples. `license` defaults to
    the license of the model the weights were converted from (`converted_from`, `vaswani convert`), else
    apache-2.0. `evaluation`: what `vaswani evaluate --output` wrote for this model (checked by `vaswani card`): its
    scores are the card's test scores (`with_evaluation`)."""
    model_dir = Path(model_dir)
    if (model_dir / EXPORT_INFO_FILE).is_file():  # a CTranslate2 export: its config.json is CTranslate2's
        return render_export_card(model_dir, repo_id=repo_id, license=license, evaluation=evaluation)
    config = _read_json(model_dir / CONFIG_FILE, fix="restore it or save the model again")
    if config is None:
        raise FileNotFoundError(f"{model_dir} has no config.json: not a saved model folder.")
    results = results if results is not None else _read_json(model_dir / RESULTS_FILE) or {}
    run_args = run_args if run_args is not None else _read_json(model_dir / RUN_ARGS_FILE) or {}
    evaluation_note = None
    if evaluation is not None:
        results, run_args, evaluation_note = with_evaluation(results, run_args, evaluation)
    run_args = public_run_args(run_args)
    if config.get("model_type") in LANGUAGE_MODELS:
        return render_language_model_card(model_dir, config, results, run_args, repo_id=repo_id or model_dir.name,
                                          license=license or "apache-2.0")  # fmt: skip
    source, target = run_args.get("source_lang"), run_args.get("target_lang")
    repo_id = repo_id or model_dir.name
    datasets = _dataset_names(run_args)
    converted_from = config.get("converted_from") or None
    license = license or (converted_from or {}).get("license") or "apache-2.0"

    targets = target_languages(model_dir)
    card_data = ModelCardData(
        language=card_languages(source, target, targets),
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "transformer", "vaswani", "attention-is-all-you-need"],
        datasets=datasets or None,
        metrics=["bleu", "chrf"],
        model_name=repo_id,
        eval_results=_eval_results(results, source, target, run_args) or None,
    )
    first_example = next(iter(results.get("test", results.get("validation", {})).get("examples", [])), None)
    return ModelCard.from_template(
        card_data,
        template_path=str(TRANSLATION_TEMPLATE),
        model_name=repo_id,
        repo_id=repo_id,
        source_language_name=LANGUAGE_NAMES.get(source, source or "source"),
        target_language_name=target_language_name(target, targets),
        target_languages=targets,
        config=_Namespace(config),
        parameters=_count_parameters(model_dir),
        normalization=_normalization(config),
        differences=_differences(config),
        results_table=_results_table(results),
        bleu_signature=_first(results, "bleu_signature"),
        chrf_signature=_first(results, "chrf_signature"),
        evaluation_note=evaluation_note,
        num_beams=run_args.get("num_beams", 4),
        length_penalty=run_args.get("length_penalty", 0.6),
        training=_training_rows(run_args, results),
        example_source=(first_example or {}).get("source", "Hello world."),
        language_token=f">>{targets[0]}<< " if targets else "",  # what MarianTokenizer reads before a source
        intended_use=intended_use or DEFAULT_INTENDED_USE,
        converted_from=converted_from,
    )


def render_language_model_card(
    model_dir: Path, config: dict, results: dict, run_args: dict, *, repo_id: str, license: str
) -> ModelCard:
    """The card of a causal or masked language model (`LANGUAGE_MODELS`): its task, pipeline and the loss,
    perplexity and accuracy of its held-out splits."""
    kind = LANGUAGE_MODELS[config["model_type"]]
    side = kind["stack"]
    datasets = _dataset_names(run_args)
    eval_results = [
        EvalResult(task_type=kind["pipeline_tag"], dataset_type=_eval_dataset(run_args, split),
                   dataset_name=_eval_dataset(run_args, split),
                   dataset_split=results[split].get("split", split), metric_type=metric,
                   metric_name=metric, metric_value=round(float(results[split][metric]), 4))
        for split in ("validation", "test") for metric in ("perplexity", "accuracy")
        if isinstance(results.get(split, {}).get(metric), (int, float))
    ]  # fmt: skip
    card_data = ModelCardData(
        license=license, library_name="transformers", pipeline_tag=kind["pipeline_tag"], model_name=repo_id,
        tags=[kind["pipeline_tag"], kind["task"], "transformer", "vaswani", "attention-is-all-you-need"],
        datasets=datasets or None, metrics=["perplexity", "accuracy"], eval_results=eval_results or None,
    )  # fmt: skip
    rows = [{"split": results[split].get("split", split),
             **{key: f"{results[split][key]:.4g}" if key in results[split] else "-"
                for key in ("loss", "perplexity", "accuracy")}}
            for split in ("validation", "test") if results.get(split)]  # fmt: skip
    return ModelCard.from_template(
        card_data, template_path=str(LANGUAGE_MODEL_TEMPLATE), model_name=repo_id, task=kind["task"], stack=side,
        description=kind["description"], accuracy_name=kind["accuracy_name"], config=_Namespace(config),
        layers=config.get(f"{side}_layers"), ffn_dim=config.get(f"{side}_ffn_dim"),
        heads=config.get(f"{side}_attention_heads"), parameters=_count_parameters(model_dir),
        normalization=_normalization(config), results_table=rows, training=_training_rows(run_args, results),
        usage=kind["usage"].format(repo_id=repo_id),
    )  # fmt: skip


def render_export_card(export_dir: Path, *, repo_id: str | None = None, license: str | None = None,
                       evaluation: dict | None = None) -> ModelCard:  # fmt: skip
    """The card of a CTranslate2 export (`vaswani export --format ctranslate2`): the exported model's architecture
    (vaswani_ctranslate2.json keeps its configuration), the quantization, how to run it (`vaswani translate`,
    `vaswani serve`, the `Translator`; a language model: CTranslate2's Generator), the training record of the
    run_args.json the export copied, and the scores of `evaluation` (`vaswani evaluate` of the export) when given."""
    info = read_json_object(export_dir / EXPORT_INFO_FILE, fix="export the model again")
    config = info.get("source_config") if isinstance(info.get("source_config"), dict) else {}
    run_args = _read_json(export_dir / RUN_ARGS_FILE) or {}
    named = bool(run_args.get("source_lang") and run_args.get("target_lang"))  # what `vaswani serve` reads
    results, evaluation_note = {}, None
    if evaluation is not None:
        results, run_args, evaluation_note = with_evaluation(results, run_args, evaluation)
    run_args = public_run_args(run_args)
    source, target = run_args.get("source_lang"), run_args.get("target_lang")
    repo_id = repo_id or export_dir.name
    local_name = repo_id.split("/")[-1]  # the folder the card's commands download it to
    architecture, stacks = EXPORTED_ARCHITECTURES.get(info.get("architecture"), ("Transformer", ("decoder",)))
    translator = info.get("runs_with") == "ctranslate2.Translator"
    generation = info.get("generation") or {}
    converted_from = config.get("converted_from") or None
    if not translator:  # a language model's run_args.json holds the translation defaults, not its text's language
        source = target = None
    names = [LANGUAGE_NAMES.get(code, code) for code in (source, target)]
    targets = target_languages(export_dir) if translator else []
    if targets:
        names[1] = target_language_name(target, targets)
    pair = (
        f" ({names[0]} → {names[1]})" if source and (target or targets) else f" (into {names[1]})" if targets else ""
    )
    card_data = ModelCardData(
        language=card_languages(source, target, targets),
        license=license or (converted_from or {}).get("license") or "apache-2.0",
        library_name="ctranslate2",
        pipeline_tag="translation" if translator else None,
        tags=["ctranslate2", str(info.get("quantization")), "transformer", "vaswani", "attention-is-all-you-need",
              *(["translation"] if translator else [])],
        datasets=_dataset_names(run_args) or None,
        metrics=["bleu", "chrf"] if results else None,
        model_name=repo_id,
        eval_results=_eval_results(results, source, target, run_args) or None,
    )  # fmt: skip
    return ModelCard.from_template(
        card_data, template_path=str(CTRANSLATE2_TEMPLATE), model_name=repo_id, repo_id=repo_id,
        local_name=local_name, config=_Namespace(config), quantization=info.get("quantization"),
        serve_model=serve_model(local_name, source, target, named, targets),
        description=f"a translation model{pair}" if translator else f"a {architecture}",
        architecture=architecture, layers=" + ".join(f"{config.get(f'{s}_layers')} {s} layers" for s in stacks),
        ffn_dim=config.get(f"{stacks[0]}_ffn_dim"), heads=config.get(f"{stacks[0]}_attention_heads"),
        marian=all((export_dir / name).is_file() for name in MARIAN_TOKENIZER_FILES),
        not_exported=info.get("not_exported"), translator=translator, runs_with=str(info.get("runs_with")),
        num_beams=generation.get("num_beams") or 4,  # a converted model's generation config may leave them unset
        length_penalty=0.6 if generation.get("length_penalty") is None else generation["length_penalty"],
        max_new_tokens_over_source=info.get("max_new_tokens_over_source", 50),
        example_source="Hello world.", target_languages=targets, results_table=_results_table(results),
        bleu_signature=_first(results, "bleu_signature"), chrf_signature=_first(results, "chrf_signature"),
        evaluation_note=evaluation_note, training=_training_rows(run_args, {}),
        scored_with=(evaluation or {}).get("decoding", {}),
    )  # fmt: skip


def serve_model(local_name: str, source: str | None, target: str | None, named: bool, targets: list[str]) -> str:
    """The `--model` of the export card's `vaswani serve` line: the folder where its run_args.json names the pair,
    else `SRC-TGT=` before it; a multilingual model's `SRC-*=` (every target language, quoted for the shell)."""
    if targets:
        return f"'{source or 'SRC'}-*={local_name}'"
    return local_name if named else f"{source or 'SRC'}-{target or 'TGT'}={local_name}"


def target_languages(model_dir: Path) -> list[str]:
    """The languages a multilingual model translates into: the codes of its tokenizer's target-language tokens
    (`>>es<<`, `Translator.target_languages`); empty for a model of one target language or without a tokenizer."""
    if not has_tokenizer(model_dir):
        return []
    return sorted(target_languages_of(load_tokenizer(model_dir, light=True).get_vocab()))


def target_language_name(target: str | None, targets: list[str]) -> str:
    """What the card calls the target side: the language, or a multilingual model's languages."""
    if targets:
        return ", ".join(LANGUAGE_NAMES.get(code, code) for code in targets)
    return LANGUAGE_NAMES.get(target, target or "target")


def card_languages(source: str | None, target: str | None, targets: list[str]) -> list[str] | None:
    """The card's `language` metadata: the pair's codes and a multilingual model's target codes that are ISO 639
    codes (the Hub's; "pt_BR" or "zho_Hans" are not)."""
    codes = [code for code in (source, target) if code]
    codes += [code for code in targets if re.fullmatch(r"[a-z]{2,3}", code) and code not in codes]
    return codes or None


def with_evaluation(results: dict, run_args: dict, evaluation: dict) -> tuple[dict, dict, str]:
    """`results` and `run_args` with the test scores of `evaluation` (what `vaswani evaluate --output` wrote) in
    place of the run's own: the test split is the evaluation's file, in its languages, decoded with its beam and
    length penalty; and the sentence the card says about it."""
    files = evaluation["test_file"]  # one file, or the two of a prefix PATH (PATH.SRC, PATH.TGT)
    test_file = files[0] if len(files) == 1 else os.path.commonprefix(files).rstrip(".")
    decoding = evaluation["decoding"]
    scores = {key: evaluation[key] for key in ("bleu", "chrf", "bleu_signature", "chrf_signature")}
    results = {**results, "test": {**scores, "split": evaluation.get("split", "test")}}  # test[:N]: --max_test_samples
    run_args = {**run_args, "test_file": test_file, "source_lang": evaluation["source_lang"],
                "target_lang": evaluation["target_lang"], "num_beams": decoding["num_beams"],
                "length_penalty": decoding["length_penalty"]}  # fmt: skip
    note = (f"The test scores are `vaswani evaluate`'s on {Path(test_file).name} ({evaluation['pairs']:,} pairs), "
            f"decoded by {evaluation['backend']} ({evaluation['computes_in']})"
            + (" with the paper's length penalty" if decoding.get("paper_decoding") else "") + ".")  # fmt: skip
    return results, run_args, note


def write_model_card(output_dir: str | Path, *, args: dict | None = None, results: dict | None = None,
                     config=None, repo_id: str | None = None) -> Path:  # fmt: skip
    """Render the card of the model in `output_dir` and save it as README.md. `config` is accepted for callers that
    have it at hand; the card reads config.json from the folder."""
    path = Path(output_dir) / MODEL_CARD_FILE
    card = render_model_card(output_dir, results=results, run_args=_plain(args) if args else None,
                             repo_id=repo_id or (args or {}).get("hub_model_id"))  # fmt: skip
    write_file_atomically(path, str(card))
    return path


def public_run_args(run_args: dict) -> dict:
    """`run_args` as published: local paths (`LOCAL_PATH_OPTIONS`, and a `dataset_name` that is a local folder)
    reduced to their last part, e.g. /home/me/data/train.jsonl -> train.jsonl."""
    public = dict(run_args)
    for key in LOCAL_PATH_OPTIONS:
        if isinstance(public.get(key), str):
            public[key] = Path(public[key]).name
    name = public.get("dataset_name")
    if isinstance(name, str) and (os.path.isabs(name) or name.startswith((".", "~")) or os.path.exists(name)):
        public["dataset_name"] = Path(name).name
    return public


# -- helpers ------------------------------------------------------------------------------------------------------------
class _Namespace:
    def __init__(self, values: dict):
        self.__dict__.update(values)


def _read_json(
    path: Path, fix: str = "restore it from the run, or remove it to write the card without it"
) -> dict | None:
    """The object in `path` (None when there is no such file); damaged JSON is a `ModelFolderError` naming it."""
    return read_json_object(path, fix=fix) if path.exists() else None


def _plain(args: dict) -> dict:
    return {k: v for k, v in args.items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))}


def _first(results: dict, key: str):
    for split in ("test", "validation"):
        if key in results.get(split, {}):
            return results[split][key]
    return None


def _split_sources(run_args: dict) -> dict[str, str | None]:
    """Where train.py read each split (`vaswani.data.loading.load_translation_splits`; with --prepared_data the
    sources `vaswani prepare` read, which train.py records): the split's file, else the named dataset
    (`--dataset_name`), else, for a validation set aside from the training data, the training data. Public names
    (`public_run_args`): a file's last part."""
    named = run_args.get("dataset_name")
    sources = {split: run_args.get(f"{split}_file") or named for split in ("train", "validation", "test")}
    sources["validation"] = sources["validation"] or sources["train"]
    return sources


def _dataset_names(run_args: dict) -> list[str]:
    """The Hub datasets the model was trained or scored on: the named dataset where some split was read from it
    (not the built-in demo dataset, which is not on the Hub); files are no Hub dataset."""
    name = run_args.get("dataset_name")
    if not name or name == "demo" or name not in _split_sources(run_args).values():
        return []
    return [name]


def _eval_dataset(run_args: dict, split: str) -> str:
    """The dataset name of a split's scores in the model-index: its source (`_split_sources`), "vaswani-demo" for
    the built-in dataset, "custom" where the folder does not say (no run_args.json)."""
    source = _split_sources(run_args)[split]
    return "vaswani-demo" if source == "demo" else source or "custom"


def _eval_results(results: dict, source, target, run_args: dict) -> list[EvalResult]:
    task = f"Translation {source}-{target}" if source and target else "Translation"
    out = []
    for split in ("validation", "test"):
        scores = results.get(split, {})
        dataset = _eval_dataset(run_args, split)
        for metric, name, signature in (("bleu", "BLEU", "bleu_signature"), ("chrf", "chrF", "chrf_signature")):
            if metric in scores:
                out.append(
                    EvalResult(
                        task_type="translation",
                        task_name=task,
                        dataset_type=dataset,
                        dataset_name=dataset,
                        dataset_split=scores.get("split", split),  # test[:N]: --max_test_samples
                        metric_type=metric,
                        metric_name=name,
                        metric_value=round(float(scores[metric]), 2),
                        metric_args={"signature": scores.get(signature)} if scores.get(signature) else None,
                    )  # fmt: skip
                )
    return out


def _count_parameters(model_dir: Path) -> str:
    """Unique parameters in the saved weights (tied matrices are stored once)."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return "unknown"
    from safetensors import safe_open

    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shape = f.get_slice(key).get_shape()
                count = 1
                for dim in shape:
                    count *= dim
                total += count
    return f"{total / 1e6:.1f}M"


def _normalization(config: dict) -> str:
    position = "PostNorm (the paper)" if config.get("norm_position", "post") == "post" else "PreNorm"
    kind = "LayerNorm" if config.get("norm_type", "layernorm") == "layernorm" else "ScaleNorm"
    return f"{position}, {kind}" + (", FixNorm embeddings" if config.get("fixnorm") else "")


def _differences(config: dict) -> list[dict]:
    paper = VaswaniConfig().to_dict()
    rows = [
        {"name": name, "value": config.get(name), "paper": paper[name]}
        for name in ARCHITECTURE_OPTIONS  # the "differs from the paper" table, in reading order
        if name in config and config[name] != paper[name]
    ]
    pruned = config.get("pruned_layers")
    if pruned:
        kept = "; ".join(f"{side}: kept {layers}" for side, layers in pruned.items())
        # LayerDrop's pruning (Fan et al. 2019) where every pruned stack was trained to lose layers; else a model cut
        # to fewer layers (e.g. a student cut from its teacher, to be trained on)
        layerdrop = all(config.get(f"{side}_layerdrop") for side in pruned)
        rows.append({"name": "pruned (LayerDrop)" if layerdrop else "pruned layers", "value": kept,
                     "paper": "no pruning"})  # fmt: skip
    return rows


def _results_table(results: dict) -> list[dict]:
    rows = []
    for split in ("validation", "test"):
        scores = results.get(split)
        if scores:
            rows.append({
                "split": scores.get("split", split),
                **{key: f"{scores[key]:.2f}" if isinstance(scores.get(key), (int, float)) else "-"
                   for key in ("bleu", "chrf", "loss", "ppl")},
            })  # fmt: skip
    return rows


def _training_rows(run_args: dict, results: dict) -> list[tuple[str, str]]:
    if not run_args:
        return []
    data = _split_sources(run_args)["train"]
    if data == "demo":
        data = "the built-in demo dataset (numbers, dates, times and quantities in English and German)"
    if distilled := run_args.get("distilled_from"):  # `vaswani distill`'s student: the file is a teacher's
        data = _distilled_text(data, distilled)
    task = run_args.get("task", "translation")
    pair = f"{run_args.get('source_lang')} → {run_args.get('target_lang')}"
    rows = [] if task == "translation" else [("Task", f"{task} (`vaswani train --task {task}`)")]
    rows += [
        ("Data", f"{data} ({pair if task == 'translation' else 'text column ' + str(run_args.get('text_column'))})"),
        *([("Cleaning", cleaning)] if (cleaning := _cleaning_text(run_args)) else []),
        ("Updates", _updates(run_args, results)),
        ("Batch", f"{run_args.get('max_tokens')} tokens per device x {run_args.get('gradient_accumulation_steps', 1)} "
                  "accumulation steps"),
        ("Optimizer", f"Adam ({run_args.get('adam_beta1')}, {run_args.get('adam_beta2')}, "
                      f"{run_args.get('adam_epsilon')}), {run_args.get('lr_scheduler')} schedule, "
                      f"{run_args.get('warmup_steps')} warmup steps"),
    ]  # fmt: skip
    stopping = results.get("early_stopping") or {}
    if results.get("final_model"):
        rows.append(("Final model", _final_model_text(results["final_model"])))
    elif results.get("averaged_checkpoints") and stopping.get("best_step") is not None:  # a results.json of before
        rows.append(("Checkpoint averaging", f"{len(results['averaged_checkpoints'])} checkpoint(s) ending at the best "
                     f"validation {stopping['metric']} (step {stopping['best_step']})"))  # fmt: skip
    elif results.get("averaged_checkpoints"):
        names = results["averaged_checkpoints"]  # `vaswani average`, or a results.json of before
        span = names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"
        rows.append(("Checkpoint averaging", f"{len(names)} checkpoint(s): {span}"))
    if results.get("finished_early"):
        rows.append(("Finished early", results["finished_early"]))
    if results.get("target_tokens"):
        rows.append(("Target tokens seen", f"{results['target_tokens']:,}"))
    if results.get("train_seconds"):
        rows.append(("Training time", f"{results['train_seconds'] / 60:.1f} min"))
    return rows


def _cleaning_text(run_args: dict) -> str | None:
    """The training pairs the run's cleaning options dropped (`PairFilter.described`: the log's words), in words and
    as options; None where none was on."""
    rules = PairFilter(**{name: run_args[name] for name in CLEANING_OPTIONS if name in run_args}).described()
    if not rules:
        return None
    return (f"training pairs dropped: {'; '.join(words for _, words, _ in rules)} "
            f"(`{' '.join(flag for _, _, flag in rules)}`)")  # fmt: skip


def _distilled_text(data: str, distilled: dict) -> str:
    """A student's training data in words, e.g. "train.jsonl: the sources of corpus.jsonl translated by the teacher
    base-en-es (sequence-level knowledge distillation, `vaswani distill`), with 2,000 of the original pairs"."""
    teachers = distilled["teachers"]
    by = f"the teacher {teachers[0]}" if len(teachers) == 1 else f"the ensemble of {' + '.join(teachers)}"
    texts = f"the sources of {distilled['train_file']}"
    if distilled.get("monolingual_sentences"):
        texts += f" and {distilled['monolingual_sentences']:,} monolingual sentences"
    text = f"{data}: {texts} translated by {by} (sequence-level knowledge distillation, `vaswani distill`)"
    if distilled.get("original_pairs_added"):
        text += f", with {distilled['original_pairs_added']:,} of the original pairs"
    return text


def _updates(run_args: dict, results: dict) -> str:
    """The updates the run made (results.json), or in a folder without its results (`vaswani prune` leaves them
    behind: they score the full model) the most it was set to make."""
    if "step" in results:
        return str(results["step"])
    planned = run_args.get("max_train_steps")
    return f"at most {planned} (`--max_train_steps`)" if planned else "-"


def _final_model_text(choice: dict) -> str:
    """results.json's "final_model" in words, e.g. "the average of 5 checkpoints (steps 920-1000), the best validation
    bleu on 852 examples of: last checkpoint (step 1000) 33.10, best evaluated checkpoint (step 500) 30.20, average
    33.80" (and "moving average of the weights (step 1000) 33.90" with --ema_decay)."""
    names = {"last": "last checkpoint", "best": "best evaluated checkpoint", "average": "average",
             "ema": "moving average of the weights"}  # fmt: skip

    def what(candidate: dict) -> str:
        if candidate["name"] == "average":
            first = step_of(candidate["checkpoints"][0])
            return f"the average of {len(candidate['checkpoints'])} checkpoints (steps {first}-{candidate['step']})"
        return f"the {names[candidate['name']]} (step {candidate['step']})"

    chosen = next(c for c in choice["candidates"] if c["name"] == choice["chosen"])
    if choice["selection"] != "auto":
        return f"{what(chosen)} (--final_model {choice['selection']})"
    scores = ", ".join(
        f"{names[c['name']]} (step {c['step']}) {c['score']:.2f}"
        if c["name"] != "average"
        else f"average {c['score']:.2f}"
        for c in choice["candidates"]
    )
    examples = f" on {choice['validation_examples']} examples" if choice.get("validation_examples") else ""
    return f"{what(chosen)}, the best validation {choice['metric']}{examples} of: {scores}"


__all__ = [
    "LOCAL_PATH_OPTIONS",
    "public_run_args",
    "render_export_card",
    "render_model_card",
    "with_evaluation",
    "write_model_card",
]
