"""Deprecated: the old home of the Translator. `from vaswani.translate import Translator` (and the other names it had)
still works, with a `DeprecationWarning` naming the real home of each name; import from there instead:
`from vaswani.inference.translator import Translator`. The code lives in `vaswani.inference`: translator.py
(Translator, translate_lines, read_lines), outputs.py (the output formats) and engines.py (PyTorch, CTranslate2)."""

import warnings

from vaswani import devices, errors, model_folder
from vaswani.inference import outputs, translator

# Each name this module had -> the module it lives in.
MOVED = {
    "OUTPUT_FORMATS": outputs,
    "ModelFolderError": errors,
    "TranslateError": errors,
    "Translation": translator,
    "Translator": translator,
    "check_model_folder": model_folder,
    "format_alignment": outputs,
    "format_hypotheses": outputs,
    "one_line": outputs,
    "read_lines": translator,
    "resolve_device": devices,
    "translate_lines": translator,
}


def __getattr__(name: str):
    """The moved `name`, with a `DeprecationWarning` pointing at the importing line (PEP 562)."""
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = MOVED[name].__name__
    warnings.warn(
        f"vaswani.translate is deprecated: import {name} from {home} instead (`from {home} import {name}`).",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(MOVED[name], name)


def __dir__() -> list[str]:
    return sorted([*globals(), *MOVED])


__all__ = sorted(MOVED)
