"""vaswani: the life of a Transformer translation model, one subpackage per stage over a small core.

    core         errors.py, constants.py, fileio.py, devices.py, weights.py, model_folder.py, metrics/
    stages       data/, training/, inference/, export/, convert/, hub/ (and translate.py, the deprecated old home of Translator)
    command      cli/ (the `vaswani` command: one module per subcommand)

Imports point one way, core <- stages <- cli (tests/test_layout.py checks it); the models are `modeling_vaswani`
and the tokenizer `tokenization`, beside this package. docs/layout.md has one line per module.
"""
