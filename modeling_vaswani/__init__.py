"""vaswani: the original Transformer of "Attention Is All You Need" as a Hugging Face model.

Importing the package registers the model with transformers' Auto classes (`AutoConfig`, `AutoModel`,
`AutoModelForSeq2SeqLM`) and marks the classes for `trust_remote_code` export, so that `save_pretrained`
writes an `auto_map` and copies the modeling files next to the weights. It also registers the translation pipeline
(`VaswaniTranslationPipeline`, task "vaswani-translation") that every saved model carries.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_vaswani import PRESETS, VaswaniConfig
from .modeling_vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniModel,
    VaswaniPreTrainedModel,
    every_other_layers_to_keep,
    shift_tokens_right,
    sinusoidal_position_table,
)
from .pipeline_vaswani import VaswaniTranslationPipeline
from .scheduling_vaswani import DropHeadCallback, DropHeadScheduler, drophead_rate

AutoConfig.register(VaswaniConfig.model_type, VaswaniConfig, exist_ok=True)
AutoModel.register(VaswaniConfig, VaswaniModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VaswaniConfig, VaswaniForConditionalGeneration, exist_ok=True)

VaswaniConfig.register_for_auto_class()
VaswaniModel.register_for_auto_class("AutoModel")
VaswaniForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "PRESETS",
    "DropHeadCallback",
    "DropHeadScheduler",
    "VaswaniConfig",
    "VaswaniForConditionalGeneration",
    "VaswaniModel",
    "VaswaniPreTrainedModel",
    "VaswaniTranslationPipeline",
    "drophead_rate",
    "every_other_layers_to_keep",
    "shift_tokens_right",
    "sinusoidal_position_table",
]
