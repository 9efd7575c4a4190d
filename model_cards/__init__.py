"""Model card templates (Jinja, rendered by huggingface_hub's `ModelCard.from_template`); see vaswani/model_card.py."""

from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
TRANSLATION_TEMPLATE = TEMPLATE_DIR / "translation.md"
