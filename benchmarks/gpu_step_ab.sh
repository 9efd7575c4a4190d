#!/usr/bin/env bash
# Issue 41's GPU measurement, prepared to fit the device tool's calls (at most 10 minutes each, 15 in a session):
#
#   bash benchmarks/gpu_step_ab.sh session [SECONDS [FIRST]]   # all of it, most important first, within SECONDS
#                                                              # (from group FIRST on: a second call goes on)
#   bash benchmarks/gpu_step_ab.sh big            # one H100/H200: big, before / after / A/A, bf16, 25k-token batches
#   bash benchmarks/gpu_step_ab.sh base           # the same for base
#   bash benchmarks/gpu_step_ab.sh base graphs    # after + CUDA graphs (--torch_compile_mode reduce-overhead)
#   DEVICE=cpu bash benchmarks/gpu_step_ab.sh session 400   # the same script tried on a CPU first (tiny presets)
#
# train.py's own loop on real-length batches (bench_gpu.py's synthetic corpus): "before" is the step with every speed
# option off (the code before issue 41), "after" with shape buckets, the compiled layers, the fused loss and bf16
# weights on, "A2" the before once more (the A/A noise). bench_gpu.py prints tokens/s, MFU and each variant's ratio
# to the first.
#
# `session` runs these groups in order, each a bench_gpu.py (or bench_gpu_step.py) call of its own, and starts a
# group only while its estimated time is left of SECONDS (default 540, a call's 10 minutes less start-up). The order
# follows the first two GPU sessions (benchmarks/README.md, "Issue 41's step options on a GPU": the fused loss ran at
# 0.80x, the compiled layers with buckets and bf16 weights at 1.07-1.17x on big; then the vocabulary's alignment
# made big's step 1.14x faster, and every trained tokenizer is now padded to a multiple of 8), so "fast" is the three
# without the fused loss, and bench_gpu.py's corpus has 12,112 tokens:
#   1. big: off / fast / off again (the A/A)          2. base: the same
#   3. base: off / fast with CUDA graphs (reduce-overhead; on a GPU only)
#   4. where the time of big's fast step goes (bench_gpu_step.py --profile, fixed shape)
#   5. big: off / bf16 weights / fused loss (default chunk, and 4,096 tokens) / all four (each mechanism's share)
# A run that fails or outlasts what is left is reported and the others go on (bench_gpu.py --keep_going
# --run_timeout). Everything lands in $OUT (the device tool's folder) or ./gpu_session: session.txt (all output) and
# gpu_session.tar.gz (each group's JSON and every train.py log), remade after each group so a call stopped at its
# limit still brings back what finished.
set -uo pipefail
cd "$(dirname "$0")/.."
preset=${1:?give session, big, base or tiny}
device=${DEVICE:-cuda}
off="--shape_buckets false --torch_compile false --fused_loss false --bf16_weights false"
on="--shape_buckets true --torch_compile true --fused_loss true --bf16_weights true"
py=${PYTHON:-python3}
if [ "$device" = cpu ]; then
    sizes=(--max_tokens 600 --steps 6 --warmup_steps 2 --pairs 300 --vocab_size 400 --peak_tflops 1)
    step_sizes=(--shapes 8x12x14 --steps 2 --peak_tflops 1)
else
    sizes=(--steps 100 --warmup_steps 60)  # the first 60 updates compile (a few graphs a layer kind)
    step_sizes=(--shapes 200x120x125 --steps 10)
fi
bench() { PYTHONUNBUFFERED=1 "$py" benchmarks/bench_gpu.py --device "$device" --mixed_precision bf16 --repeats 1 \
    "${sizes[@]}" "$@"; }

if [ "$preset" != session ]; then
    set -e
    variants=(--variant "before=$off" --variant "after=$on" --variant "A2=$off")
    if [ "${2:-}" = graphs ]; then
        variants=(--variant "before=$off" --variant "graphs=$on --torch_compile_mode reduce-overhead")
    fi
    bench --presets "$preset" "${variants[@]}" --json "${OUT:-.}/bench_gpu_${preset}.json"
    exit
fi

budget=${2:-540}
first=${3:-1}
out=${OUT:-gpu_session}
if [ -e "$out/session.txt" ] || [ -e "$out/gpu_session.tar.gz" ]; then
    echo "error: $out already holds a session's results: move them away or give OUT=another folder" >&2
    exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
big=big base=base
[ "$device" = cpu ] && big=tiny base=tiny
log="$out/session.txt"
pack() { tar -czf "$out/.gpu_session.tar.gz" -C "$work" . && mv "$out/.gpu_session.tar.gz" "$out/gpu_session.tar.gz"; }
group() {  # group NAME ESTIMATED_SECONDS COMMAND...: run it if its estimate fits in what is left
    local name=$1 estimate=$2 left=$((budget - SECONDS))
    shift 2
    [ "${name%% *}" -lt "$first" ] && return
    if [ "$left" -lt "$estimate" ]; then
        echo "== $name: skipped ($left s left, about $estimate s needed)" | tee -a "$log"
        return
    fi
    local start=$SECONDS
    echo "== $name ($(date -u +%H:%M:%S), $left s left)" | tee -a "$log"
    "$@" 2>&1 | tee -a "$log"
    echo "== $name: exit status ${PIPESTATUS[0]} after $((SECONDS - start)) s" | tee -a "$log"
    pack
}
left() { echo $((budget - SECONDS > 30 ? budget - SECONDS : 30)); }  # seconds a command may still take (30 at least)
gpu_bench() {  # gpu_bench NAME ARGS...: bench_gpu.py into the session's folders, each run limited to what is left
    local name=$1
    shift
    bench "$@" --keep_going --run_timeout "$(left)" --logs "$work/logs/$name" --json "$work/$name.json"
}

{ echo "session of gpu_step_ab.sh on $device, $(date -u), budget $budget s"; git log -1 --format='commit %H %s' 2>/dev/null
  "$py" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv
} 2>&1 | tee "$log"

fast="--shape_buckets true --torch_compile true --fused_loss false --bf16_weights true"
group "1 $big off/fast/A2" 200 gpu_bench big-ab --presets "$big" --variant "off=$off" --variant "fast=$fast" \
    --variant "A2=$off"
group "2 $base off/fast/A2" 180 gpu_bench base-ab --presets "$base" --variant "off=$off" --variant "fast=$fast" \
    --variant "A2=$off"
[ "$device" = cpu ] || group "3 $base graphs" 160 gpu_bench base-graphs --presets "$base" --variant "off=$off" \
    --variant "graphs=$fast --torch_compile_mode reduce-overhead"
group "4 $big step profile" 90 timeout "$(left)" "$py" \
    benchmarks/bench_gpu_step.py --device "$device" --presets "$big" "${step_sizes[@]}" --bf16_weights true \
    --torch_compile true --profile
chunk=4096
[ "$device" = cpu ] && chunk=32
group "5 $big mechanisms" 250 gpu_bench big-mechanisms --presets "$big" --variant "off=$off" \
    --variant "bf16w=${off/--bf16_weights false/--bf16_weights true}" \
    --variant "fused=${off/--fused_loss false/--fused_loss true}" \
    --variant "fused$chunk=${off/--fused_loss false/--fused_loss true} --loss_chunk_tokens $chunk" --variant "all=$on"
echo "session done after $SECONDS s" | tee -a "$log"
pack
