#!/usr/bin/env bash
# Issue 41's CPU measurement (benchmarks/README.md, "Issue 41's step options on a CPU"), one part after another on a
# quiet machine, one thread, about 27 minutes on a Zen 4:
#
#   bash benchmarks/cpu_step_ab.sh [OLD_TREE]
#
# small-data: every option off, the A/A, each option alone and three together (100 updates, 20 not timed, 2 runs
# each); base dims: off, A/A, fused loss, bf16 weights (20 updates, 5 not timed); the compiled layers with their
# buckets after 250 warm-up updates; then, with OLD_TREE (a worktree of the code before issue 41 with its own .venv
# and this checkout's benchmarks/bench_gpu.py and common.py), the defaults of the two trees alternating, 2 rounds.
# The outputs go to runs/cpu_step_ab/.
set -euo pipefail
cd "$(dirname "$0")/.."
old_tree=${1:-}
out=runs/cpu_step_ab
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
off="--fused_loss false --bf16_weights false --shape_buckets false --torch_compile false"
common=(--device cpu --corpus ../shared/data/gettext-en-es --source_lang en --target_lang es --vocab_size 8000
        --max_tokens 1024 --threads 1)
export HF_HUB_OFFLINE=1
"$py" benchmarks/bench_gpu.py "${common[@]}" --presets small-data --steps 100 --warmup_steps 20 --repeats 2 \
    --variant "off=$off" --variant "A2=$off" \
    --variant "fused=--fused_loss true --bf16_weights false --shape_buckets false --torch_compile false" \
    --variant "bf16w=--fused_loss false --bf16_weights true --shape_buckets false --torch_compile false" \
    --variant "buckets=--fused_loss false --bf16_weights false --shape_buckets true --torch_compile false" \
    --variant "three=--fused_loss true --bf16_weights true --shape_buckets true --torch_compile false" \
    --json "$out/small.json" | tee "$out/small.txt"
"$py" benchmarks/bench_gpu.py "${common[@]}" --presets base --steps 20 --warmup_steps 5 --repeats 2 \
    --variant "off=$off" --variant "A2=$off" \
    --variant "fused=--fused_loss true --bf16_weights false --shape_buckets false --torch_compile false" \
    --variant "bf16w=--fused_loss false --bf16_weights true --shape_buckets false --torch_compile false" \
    --json "$out/base.json" | tee "$out/base.txt"
"$py" benchmarks/bench_gpu.py "${common[@]}" --presets small-data --steps 400 --warmup_steps 250 --repeats 1 \
    --variant "off=$off" \
    --variant "compile=--fused_loss false --bf16_weights false --shape_buckets true --torch_compile true" \
    --json "$out/compile.json" | tee "$out/compile.txt"
if [ -n "$old_tree" ]; then
    here=$(pwd)
    for round in 0 1; do
        trees=("$old_tree" "$here"); [ "$round" = 1 ] && trees=("$here" "$old_tree")
        for tree in "${trees[@]}"; do
            name=$([ "$tree" = "$here" ] && echo new || echo old)
            (cd "$tree" && .venv/bin/python benchmarks/bench_gpu.py "${common[@]}" --presets small-data --steps 100 \
                --warmup_steps 20 --repeats 1 --json "$here/$out/default-$name-$round.json") | tee "$out/default-$name-$round.txt"
        done
    done
fi
