"""Training (`vaswani train`, `train.py`), read in this order: options.py (the command line and --config), run_dir.py
(the output folder), distributed.py (the processes), tasks.py (translation, causal_lm, masked_lm), loop.py (set-up,
the loop, the end), checkpoints.py (kill-safe saves, exact resume), evaluation.py, schedules.py (the learning
rate), stopping.py (time budget, early stopping, the final model's choice)."""
