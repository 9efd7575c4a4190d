"""The Hugging Face Hub (`vaswani push`, `vaswani card`): publishing a model folder with its model card."""
