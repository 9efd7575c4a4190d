"""The old home of the Translator, kept so that `from vaswani.translate import Translator` (and the other names it
had) keep working. The code lives in `vaswani.inference`: translator.py (Translator, translate_lines, read_lines),
outputs.py (the output formats) and engines.py (PyTorch, CTranslate2)."""

from vaswani.devices import resolve_device
from vaswani.errors import ModelFolderError, TranslateError
from vaswani.inference.outputs import OUTPUT_FORMATS, format_alignment, format_hypotheses, one_line
from vaswani.inference.translator import Translation, Translator, read_lines, translate_lines
from vaswani.model_folder import check_model_folder

__all__ = [
    "OUTPUT_FORMATS",
    "ModelFolderError",
    "TranslateError",
    "Translation",
    "Translator",
    "check_model_folder",
    "format_alignment",
    "format_hypotheses",
    "one_line",
    "read_lines",
    "resolve_device",
    "translate_lines",
]
