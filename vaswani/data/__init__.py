"""Data: reading translation pairs and texts from files or `datasets`, token-budget batching, and the demo dataset."""
