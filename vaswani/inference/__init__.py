"""Inference (`vaswani translate`): the engines (PyTorch, CTranslate2), the Translator and the output formats."""
