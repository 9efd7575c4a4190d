"""Training (`vaswani train`, `train.py`): options, run folder, processes, checkpoints, evaluation, tasks, the loop,
learning-rate schedules and stopping rules."""
