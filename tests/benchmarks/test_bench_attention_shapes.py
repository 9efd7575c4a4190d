"""benchmarks/bench_attention_shapes.py without a GPU: a CPU smoke run times every row."""

import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_attention_shapes import batch, main  # noqa: E402


def test_every_batch_has_a_new_shape_and_padded_rows():
    first, second = batch(1, 600, "cpu"), batch(2, 600, "cpu")
    assert first["input_ids"].shape != second["input_ids"].shape
    assert first["labels"].shape[1] != second["labels"].shape[1]
    assert not first["attention_mask"][0].all() and first["attention_mask"][1].all()


def test_a_cpu_smoke_run_times_the_four_rows():
    rows = main(["--device", "cpu", "--preset", "tiny", "--steps", "2", "--tokens", "300"])
    assert [label for label, _ in rows] == [
        "eager", "sdpa, cuDNN attention allowed", "sdpa, cuDNN attention off", "sdpa, cuDNN allowed, same shapes again"
    ]  # fmt: skip
    assert all(ms > 0 for _, ms in rows)
