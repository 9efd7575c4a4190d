"""Export (`vaswani export`, `vaswani average`, `vaswani prune`): a trained model made ready to deploy."""
