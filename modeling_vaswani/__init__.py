"""vaswani: the original Transformer of "Attention Is All You Need" as a Hugging Face model.

Three families of models share one set of blocks: the encoder-decoder of the paper (`VaswaniConfig`, model_type
"vaswani"), the decoder-only language model (`VaswaniDecoderConfig`, "vaswani-decoder") and the encoder-only model
(`VaswaniEncoderConfig`, "vaswani-encoder"). Importing the package registers each with transformers' Auto classes
(`AutoConfig` and the family's `auto_classes`: `AutoModel` and `AutoModelForSeq2SeqLM`; `AutoModel` and
`AutoModelForCausalLM`; `AutoModel`, `AutoModelForMaskedLM` and `AutoModelForSequenceClassification`) and marks the
classes for `trust_remote_code` export, so that `save_pretrained` writes an `auto_map` and copies the modeling files
next to the weights. It also registers the translation pipeline (`VaswaniTranslationPipeline`, task
"vaswani-translation") that every saved encoder-decoder model carries.
"""

import transformers
from transformers import AutoConfig

from . import modeling_vaswani, modeling_vaswani_lm
from .configuration_vaswani import PRESETS, VaswaniConfig
from .configuration_vaswani_lm import VaswaniDecoderConfig, VaswaniEncoderConfig
from .modeling_vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniModel,
    VaswaniPreTrainedModel,
    every_other_layers_to_keep,
    shift_tokens_right,
    sinusoidal_position_table,
)
from .modeling_vaswani_lm import (
    VaswaniDecoderModel,
    VaswaniDecoderPreTrainedModel,
    VaswaniEncoderModel,
    VaswaniEncoderPreTrainedModel,
    VaswaniForCausalLM,
    VaswaniForMaskedLM,
    VaswaniForSequenceClassification,
)
from .pipeline_vaswani import VaswaniTranslationPipeline
from .scheduling_vaswani import DropHeadCallback, DropHeadScheduler, drophead_rate

# Each family's PreTrainedModel names its Auto classes once (`auto_classes`, also written to a saved folder's
# auto_map); registration reads them from there.
for family, module in (
    (VaswaniPreTrainedModel, modeling_vaswani),
    (VaswaniDecoderPreTrainedModel, modeling_vaswani_lm),
    (VaswaniEncoderPreTrainedModel, modeling_vaswani_lm),
):
    AutoConfig.register(family.config_class.model_type, family.config_class, exist_ok=True)
    family.config_class.register_for_auto_class()
    for auto_class_name, class_name in family.auto_classes.items():
        model_class = getattr(module, class_name)
        getattr(transformers, auto_class_name).register(family.config_class, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class_name)

__all__ = [
    "PRESETS",
    "DropHeadCallback",
    "DropHeadScheduler",
    "VaswaniConfig",
    "VaswaniDecoderConfig",
    "VaswaniDecoderModel",
    "VaswaniEncoderConfig",
    "VaswaniEncoderModel",
    "VaswaniForCausalLM",
    "VaswaniForConditionalGeneration",
    "VaswaniForMaskedLM",
    "VaswaniForSequenceClassification",
    "VaswaniModel",
    "VaswaniPreTrainedModel",
    "VaswaniTranslationPipeline",
    "drophead_rate",
    "every_other_layers_to_keep",
    "shift_tokens_right",
    "sinusoidal_position_table",
]
