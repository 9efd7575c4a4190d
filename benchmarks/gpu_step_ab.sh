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
# `session` runs these groups in order, each a bench_gpu.py (or bench_train_profile.py) call of its own, and starts a
# group only while its estimated time is left of SECONDS (default 540, a call's 10 minutes less start-up). The order
# follows the GPU sessions so far (benchmarks/README.md, "Issue 41's step options on a GPU", "... second session" and
# "The GPU step's host"): the fused loss loses on a GPU, so "fast" is the other three; since the host's costs went
# (4d81cb9..600851d) big's fast step reached 39.1% MFU and base, at 14.1% with every option off, was not measured
# with them, so base comes first. The fourth session (2026-11-30, "The step on a GPU, fourth session") ran groups
# 1, 2, 3's CUDA graphs (a short run) and 5; the next starts at group 3 (one call of ~330 s), then, as time allows, 4,
# with the tree of bdb9435 (bf16 weights' copies one weight at a time) made beside this checkout and carried:
#   mkdir -p runs/bdb9435 && git archive bdb9435 | tar -x -C runs/bdb9435     # here; then on the device:
#   BASELINE=runs/bdb9435 bash benchmarks/gpu_step_ab.sh session 560 3
#   1. base: off / fast / off again (the A/A)          2. big: the same
#   3. base, 300 updates of which the first 200 are not timed: fast / fast with the compiled loss (--compiled_loss
#      true: one kernel over the bf16 logits each way instead of about eight over a float32 copy; ~3 ms of base's 34 ms
#      of device work in the fourth session's profile) / fast with CUDA graphs (reduce-overhead) / graphs and the
#      compiled loss. CUDA graphs record one graph per batch shape: the fourth session's 100 updates (60 untimed) ended
#      inside the recording (its windows rose from 50,192 to 592,585 target tokens/s, 18.1% MFU). Graphs (the host's
#      launches) and the compiled loss (device work) together are the likeliest way to base's 20% (32 ms an update).
#      On a CPU: fast / compiled loss only (CUDA graphs need a GPU)
#   4. base: fast against fast with BASELINE's code, twice each, interleaved (bench_gpu.py --baseline): bf16 weights'
#      copies as multi-tensor copies into reused tensors (2e283f0) against one copy kernel per weight and direction
#      (264 small kernels an update for base); skipped without BASELINE (a folder with train.py)
#   5. where the loop's time goes: bench_train_profile.py --profile_updates over train.py's loop, big fast and base
#      off (device busy and idle per update, the host's waits, the top kernels)
#   6. big: off / bf16 weights / fused loss (default chunk, and 4,096 tokens) / all four (each mechanism's share)
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
    pairs=300 vocab=400 profile_sizes=(--max_tokens 600)
    export ACCELERATE_USE_CPU=1
else
    sizes=(--steps 100 --warmup_steps 60)  # the first 60 updates compile (a few graphs a layer kind)
    pairs=60000 vocab=37000 profile_sizes=(--max_tokens 25000)
fi
model_options() {  # train.py's model options for a preset (bench_gpu.py's tiny one on a CPU)
    if [ "$1" = tiny ]; then
        echo "--d_model 32 --encoder_layers 2 --decoder_layers 2 --encoder_attention_heads 2 --decoder_attention_heads 2"
        echo "--encoder_ffn_dim 64 --decoder_ffn_dim 64"
    else
        echo "--model_preset $1"
    fi
}
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
group "1 $base off/fast/A2" 180 gpu_bench base-ab --presets "$base" --variant "off=$off" --variant "fast=$fast" \
    --variant "A2=$off"
group "2 $big off/fast/A2" 200 gpu_bench big-ab --presets "$big" --variant "off=$off" --variant "fast=$fast" \
    --variant "A2=$off"
graphs=(--variant "graphs=$fast --torch_compile_mode reduce-overhead"
        --variant "graphs+closs=$fast --torch_compile_mode reduce-overhead --compiled_loss true")
[ "$device" = cpu ] && graphs=()
group "3 $base fast/compiled loss/graphs" 330 gpu_bench base-loss-graphs --presets "$base" --steps 300 \
    --warmup_steps 200 --variant "fast=$fast" --variant "closs=$fast --compiled_loss true" "${graphs[@]}"
if [ -n "${BASELINE:-}" ]; then
    group "4 $base fast / fast @ baseline" 240 gpu_bench base-copies --presets "$base" --variant "fast=$fast" \
        --variant "fast2=$fast" --baseline "$BASELINE"
elif [ "$first" -le 4 ]; then
    echo "== 4 $base fast / fast @ baseline: skipped (BASELINE, a folder with the older train.py, not given)" | tee -a "$log"
fi
loop_profiles() {  # the synthetic corpus of bench_gpu.py, then train.py's loop profiled: big fast, base off
    local corpus="$work.corpus" status=0
    mkdir -p "$corpus" "$work/logs/loop-profiles"
    "$py" -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_train; from pathlib import Path
paths = bench_train.make_corpus(Path('$corpus'), ${pairs}, seed=0)
bench_train.prepare_tokenizer(paths, Path('$corpus'), ${vocab}, 'en', 'de')" > /dev/null || return
    local data="--train_file $corpus/train.jsonl --validation_file $corpus/validation.jsonl --tokenizer $corpus/tokenizer
        --source_lang en --target_lang de --max_source_length 256 --max_target_length 256 --warmup_steps 4000
        --logging_steps 5 --eval_steps 0 --average_checkpoints 0 --checkpoint_minutes 100000 --checkpoint_steps 100000
        --max_eval_samples 2 --final_eval_samples 2 --num_beams 1 --mixed_precision bf16 --report_to none
        ${profile_sizes[*]}"
    for run in "fast $big 60 75 $fast" "off $base 30 45 $off"; do
        set -- $run
        local label=$1 preset=$2 after=$3 steps=$4
        shift 4
        [ "$device" = cpu ] && after=2 steps=5
        local name="$label-$preset" count=$((steps - after < 10 ? steps - after : 10))
        echo "-- loop profile: $preset $label, updates $((after + 1))-$((after + count)) ($*)"
        timeout "$(left)" "$py" benchmarks/bench_train_profile.py --profile_updates "$count" --profile_after "$after" \
            --json "$work/profile-$name.json" -- $data --max_train_steps "$steps" --output_dir "$corpus/run" \
            $(model_options "$preset") "$@" > "$work/logs/loop-profiles/$name.log" 2>&1 || status=1
        sed -n '/^profile of/,$p' "$work/logs/loop-profiles/$name.log"
        [ -s "$work/profile-$name.json" ] || tail -n 20 "$work/logs/loop-profiles/$name.log"
        rm -rf "$corpus/run"
    done
    rm -rf "$corpus"
    return $status
}
group "5 loop profiles" 180 loop_profiles
chunk=4096
[ "$device" = cpu ] && chunk=32
group "6 $big mechanisms" 250 gpu_bench big-mechanisms --presets "$big" --variant "off=$off" \
    --variant "bf16w=${off/--bf16_weights false/--bf16_weights true}" \
    --variant "fused=${off/--fused_loss false/--fused_loss true}" \
    --variant "fused$chunk=${off/--fused_loss false/--fused_loss true} --loss_chunk_tokens $chunk" --variant "all=$on"
echo "session done after $SECONDS s" | tee -a "$log"
pack
