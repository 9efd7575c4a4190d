#!/usr/bin/env bash
# Issue 41's GPU measurement, prepared to fit one call of the device tool each (at most 10 minutes):
#
#   bash benchmarks/gpu_step_ab.sh big            # one H100/H200: big, before / after / A/A, bf16, 25k-token batches
#   bash benchmarks/gpu_step_ab.sh base           # the same for base (a second call)
#   bash benchmarks/gpu_step_ab.sh base graphs    # after + CUDA graphs (--torch_compile_mode reduce-overhead)
#   DEVICE=cpu bash benchmarks/gpu_step_ab.sh tiny   # the same script tried on a CPU first (a minute)
#
# train.py's own loop on real-length batches (bench_gpu.py's synthetic corpus), interleaved: "before" is the step
# with every speed option off (the code before issue 41), "after" with shape buckets, the compiled layers, the fused
# loss and bf16 weights on, "A2" the before once more (the A/A noise). bench_gpu.py prints tokens/s, MFU and each
# variant's ratio to the first; the JSON goes to $OUT (the device tool's folder) or the current folder. Expected
# time on an H100: the tokenizer and corpus ~1 min, each before run ~1 min, each after run ~2-3 min (compiling).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?give a preset: big, base or tiny}
device=${DEVICE:-cuda}
off="--shape_buckets false --torch_compile false --fused_loss false --bf16_weights false"
on="--shape_buckets true --torch_compile true --fused_loss true --bf16_weights true"
variants=(--variant "before=$off" --variant "after=$on" --variant "A2=$off")
if [ "${2:-}" = graphs ]; then
    variants=(--variant "before=$off" --variant "graphs=$on --torch_compile_mode reduce-overhead")
fi
if [ "$device" = cpu ]; then
    sizes=(--max_tokens 600 --steps 6 --warmup_steps 2 --pairs 300 --vocab_size 400 --peak_tflops 1)
else
    sizes=(--steps 100 --warmup_steps 60)  # the first 60 updates compile (a few graphs a layer kind)
fi
PYTHONUNBUFFERED=1 "${PYTHON:-python3}" benchmarks/bench_gpu.py --device "$device" --presets "$preset" \
    --mixed_precision bf16 --repeats 1 "${sizes[@]}" "${variants[@]}" --json "${OUT:-.}/bench_gpu_${preset}.json"
