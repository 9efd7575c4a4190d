"""Translation in one call: a `Pipeline` for Vaswani models, saved with every model.

transformers 5 removed its "translation" pipeline and refuses custom pipelines registered under that name, so this
one is registered under the task `"vaswani-translation"`. `VaswaniPreTrainedModel.save_pretrained` copies this file
next to the weights and records it under `custom_pipelines` in config.json, which is how transformers finds a custom
pipeline in a folder or a Hub repository:

    from transformers import pipeline

    translate = pipeline(model="path/or/owner/name", trust_remote_code=True)
    translate("A sentence.")                              # -> "Ein Satz."
    translate(["One.", "Two.", "Three."], batch_size=16)   # -> ["Eins.", "Zwei.", "Drei."]
    translate("A sentence.", paper_decoding=True)         # the paper's beam search (GNMT length penalty)

Parameters, given when the pipeline is built or with each call:

- `num_beams`, `length_penalty`, `max_new_tokens` and any other `generate()` argument; the defaults are the model's
  generation config (the paper's 4 beams and length penalty 0.6, at most source length + 50 tokens).
- `paper_decoding=True`: rank beams with the paper's GNMT length penalty ((5 + |Y|) / 6) ** alpha and cap every
  sentence at its own source length + 50 (`generation_vaswani.paper_beam_search`).
- `max_source_length`: longer inputs are truncated to this many tokens (EOS included), with a warning; the default
  is the model's `max_position_embeddings`.

One translation per input; a whitespace-only input gives "" without being run through `generate()`. With the
package installed, the class can also be used directly: `VaswaniTranslationPipeline(model=model, tokenizer=tokenizer)`
or `pipeline("vaswani-translation", model=folder, pipeline_class=VaswaniTranslationPipeline)`.

This file imports only torch and transformers: it travels with a saved model for `trust_remote_code` loading.
"""

import torch
from transformers import AutoModelForSeq2SeqLM, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging

logger = logging.get_logger(__name__)

TASK = "vaswani-translation"


def truncate_source(input_ids: list[int], max_length: int, eos_token_id: int | None) -> list[int]:
    """The first `max_length` tokens of a tokenized source, keeping its final EOS when it had one."""
    if len(input_ids) <= max_length:
        return input_ids
    if eos_token_id is not None and input_ids[-1] == eos_token_id:
        return [*input_ids[: max_length - 1], eos_token_id]
    return input_ids[:max_length]


def is_blank(text: str) -> bool:
    """Whether `text` holds nothing to translate (empty or whitespace only): its translation is ""."""
    return not text.strip()


class VaswaniTranslationPipeline(Pipeline):
    """Strings in, translated strings out: tokenize, beam search with `model.generate`, decode.

    `pipeline(...)("text")` returns a string, `pipeline(...)(["a", "b"], batch_size=N)` a list of strings in the
    input order. See the module docstring for the parameters."""

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False

    def _sanitize_parameters(self, paper_decoding=None, max_source_length=None, **generate_kwargs):
        """Split the call's parameters: `max_source_length` for `preprocess`, the rest for `generate()`."""
        preprocess_params = {}
        if max_source_length is not None:
            if not isinstance(max_source_length, int) or max_source_length < 2:
                raise ValueError(f"max_source_length={max_source_length!r}: use a whole number of at least 2.")
            preprocess_params["max_source_length"] = max_source_length
        forward_params = dict(generate_kwargs)
        if paper_decoding is not None:
            forward_params["paper_decoding"] = bool(paper_decoding)
        return preprocess_params, forward_params, {}

    def preprocess(self, text: str, max_source_length: int | None = None) -> dict[str, torch.Tensor]:
        if not isinstance(text, str):
            raise TypeError(f"VaswaniTranslationPipeline translates strings, got {type(text).__name__}.")
        limit = max_source_length or self.model.config.max_position_embeddings
        input_ids = self.tokenizer(text)["input_ids"]
        if len(input_ids) > limit:
            logger.warning(f"An input of {len(input_ids)} tokens was truncated to max_source_length={limit} tokens.")
            input_ids = truncate_source(input_ids, limit, self.tokenizer.eos_token_id)
        input_ids = torch.tensor([input_ids])
        return {
            "input_ids": input_ids,  # (1, S); the pipeline's collator pads batches with the tokenizer's PAD
            "attention_mask": torch.ones_like(input_ids),
            "blank": torch.tensor([is_blank(text)]),  # (1,)
        }

    def _forward(self, model_inputs: dict[str, torch.Tensor], paper_decoding: bool = False, **generate_kwargs):
        """Beam search on the batch's non-blank inputs only; a blank input's row of `output_ids` is left empty."""
        blank = model_inputs.pop("blank").view(-1)  # (B,)
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        if generate_kwargs.get("num_return_sequences", 1) != 1:
            raise ValueError("VaswaniTranslationPipeline returns one translation per input: num_return_sequences=1.")
        pad_token_id = self.tokenizer.pad_token_id or 0
        output_ids = model_inputs["input_ids"].new_full((len(blank), 0), pad_token_id)  # (B, 0)
        keep = ~blank  # (B,)
        if keep.any():
            inputs = {name: tensor[keep] for name, tensor in model_inputs.items()}  # (B', S) each
            generated = self.model.generate(**inputs, paper_decoding=paper_decoding, **generate_kwargs)  # (B', T)
            output_ids = generated.new_full((len(blank), generated.shape[1]), pad_token_id)  # (B, T)
            output_ids[keep] = generated
        return {"output_ids": output_ids, "blank": blank}  # (B, T), (B,)

    def postprocess(self, model_outputs: dict[str, torch.Tensor]) -> str:
        if bool(model_outputs["blank"][0]):
            return ""
        return self.tokenizer.decode(model_outputs["output_ids"][0], skip_special_tokens=True)


def custom_pipelines_entry() -> dict:
    """The `custom_pipelines` value of config.json that lets `pipeline(model=folder, trust_remote_code=True)` find
    this pipeline (the format `Pipeline.save_pretrained` writes)."""
    return {TASK: {"impl": f"{__name__.rsplit('.', 1)[-1]}.{VaswaniTranslationPipeline.__name__}",
                   "pt": [AutoModelForSeq2SeqLM.__name__]}}  # fmt: skip


def _register() -> None:
    """Register the task once per process. The file can be imported twice (installed package, then remote code from
    a saved folder); the second copy does not overwrite the first but still records its task, which
    `Pipeline.save_pretrained` reads."""
    registered = PIPELINE_REGISTRY.supported_tasks.get(TASK)
    if registered is not None and registered["impl"].__name__ == VaswaniTranslationPipeline.__name__:
        VaswaniTranslationPipeline._registered_impl = {
            TASK: {"impl": VaswaniTranslationPipeline, "pt": (AutoModelForSeq2SeqLM,)}
        }
        return
    PIPELINE_REGISTRY.register_pipeline(
        TASK, pipeline_class=VaswaniTranslationPipeline, pt_model=AutoModelForSeq2SeqLM
    )


_register()

__all__ = ["TASK", "VaswaniTranslationPipeline", "custom_pipelines_entry", "is_blank", "truncate_source"]
