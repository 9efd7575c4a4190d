"""benchmarks/bench_cleaning.py without its training runs (minutes each; the smoke command in its docstring runs them):
the noise added to the corpus, the arms' train.py commands, and the summary's verdict."""

import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import bench_cleaning  # noqa: E402


def real_pairs(count: int) -> list[dict]:
    return [{"translation": {"en": f"source {i} words", "es": f"destino {i} palabras"}} for i in range(count)]


def test_the_noise_is_each_kind_in_its_fraction_and_the_real_pairs_stay():
    pairs = real_pairs(500)
    mixed = bench_cleaning.noisy_pairs(pairs, "en", "es", {"copies": 0.2, "misaligned": 0.1, "repeats": 0.3}, seed=0)
    assert len(mixed) == 500 + 100 + 50 + 150
    assert mixed == bench_cleaning.noisy_pairs(pairs, "en", "es", {"copies": 0.2, "misaligned": 0.1, "repeats": 0.3},
                                               seed=0)  # fmt: skip
    real = {(p["translation"]["en"], p["translation"]["es"]) for p in pairs}
    found = Counter((p["translation"]["en"], p["translation"]["es"]) for p in mixed)
    copies = [pair for pair in found.elements() if pair[0] == pair[1]]
    misaligned = [pair for pair in found.elements() if pair not in real and pair[0] != pair[1]]
    assert len(copies) == 100 and len(misaligned) <= 50 and len(misaligned) >= 45  # (a few drew their own target)
    assert all(found[pair] >= 1 for pair in real) and sum(found[pair] for pair in real) == 500 + 150 + 50 - len(
        misaligned)  # fmt: skip
    assert mixed[:500] != pairs  # shuffled in


def test_only_the_cleaned_arm_cleans_and_only_the_clean_arm_reads_the_clean_file(tmp_path):
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.jsonl").write_text("")
    args = bench_cleaning.parse_args(["--data_dir", str(tmp_path)])
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a")).save(str(tokenizer / "tokenizer.json"))
    files = {"clean": Path("clean.jsonl"), "noisy": Path("noisy.jsonl"), "tokenizer": tokenizer, "test": Path("t")}
    commands = {arm: bench_cleaning.train_command(args, arm, 1, files, Path("out")) for arm in bench_cleaning.ARMS}
    for arm, command in commands.items():
        assert command[command.index("--train_file") + 1] == ("clean.jsonl" if arm == "clean" else "noisy.jsonl")
        assert command[command.index("--seed") + 1] == "1" and command[command.index("--vocab_size") + 1] == "2"
        cleaning = [flag for flag in ("--drop_copies", "--drop_duplicates", "--max_length_ratio") if flag in command]
        assert cleaning == ([] if arm != "cleaned" else ["--drop_copies", "--drop_duplicates", "--max_length_ratio"])


def test_the_summary_says_the_gain_per_seed_and_the_verdict():
    rows = [{"arm": arm, "seed": seed, "bleu": bleu, "chrf": bleu + 20, "dropped": "9 pairs (...)"}
            for arm, seed, bleu in (("clean", 0, 30.0), ("clean", 1, 31.0), ("noisy", 0, 20.0), ("noisy", 1, 25.0),
                                    ("cleaned", 0, 29.0), ("cleaned", 1, 24.0))]  # fmt: skip
    summary = bench_cleaning.summarise(rows)
    assert "| noisy | 22.5; 20.0 / 25.0 | 42.5; 40.0 / 45.0 |" in summary
    assert "cleaned - noisy: BLEU +4.0 (per seed +9.0 / -1.0) (target > 0 at every seed: MISSED)" in summary
    assert "cleaned - clean: BLEU -4.0 (per seed -1.0 / -7.0)" in summary and "dropped: 9 pairs" in summary
    rows[-1]["bleu"] = 26.0
    assert "(target > 0 at every seed: MET)" in bench_cleaning.summarise(rows)


@pytest.mark.parametrize(("argv", "said"), [(["--copies", "-1"], "--copies -1.0 is not allowed"),
                                            (["--max_length_ratio", "0.5"], "--max_length_ratio 0.5 is not allowed"),
                                            (["--updates", "0"], "--updates and --jobs must be positive")])  # fmt: skip
def test_bad_values_are_refused(argv, said, tmp_path, capsys):
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.jsonl").write_text("")
    with pytest.raises(SystemExit):
        bench_cleaning.parse_args(["--data_dir", str(tmp_path), *argv])
    assert said in capsys.readouterr().err
