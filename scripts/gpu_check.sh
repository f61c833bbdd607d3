#!/usr/bin/env bash
# The GPU check, one command in at most 6 minutes of an H100 or H200 (every step's limit is cut to what the 6 minutes
# leave): the CUDA tests; training at the wmt14-base preset's model and tokens per step (train's default as-is, with
# the micro-batches it plans from the GPU's memory, the same as 4 micro-batches of 12,500, plain PyTorch compiled on
# the default's micro-batches, and the Trainer at its best: bf16, SDPA with cuDNN's attention off); ours compiled
# (inductor, bf16, fused Adam) against train's default at the same size, in three variants: SDPA, eager attention, and
# cuDNN's attention alone on its ragged path (TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1), each one's recompilations and graph
# breaks logged (TORCH_LOGS=recompiles,graph_breaks) into the step's log and counted in its row (torch_logs), then
# all four under torch's profiler; training at wmt14-big (MFU); decoding, base, bf16, against MarianMT at batches of
# 16 and 128 (greedy and beam 4, timed after a warm-up). The compiled Trainer (minutes of inductor on the base model)
# is left out: beside ours compiled it no longer fits the 6 minutes, nor its file the 8. The results files,
# summary.txt and the steps' logs packed in logs.tgz go into FOLDER: 8 files, at most what the device tool brings back.
#
# Choosing train's CUDA default from training_compiled.json: the contestant of the highest tokens_per_second wins if
# it beats ours:default (eager, SDPA without cuDNN) by more than 6% (noise) with compilations_measured 0 (no
# recompilation in the timed rounds: real batches vary in shape more than these; torch_logs counts those of the
# warm-up and the profiled steps too, and the step's log names their guards and any graph break); a compiled winner
# becomes auto_dynamo_backend's answer on CUDA (training/preflight.py) with its attention for --attn-implementation
# auto, in the same commit as the results files; else the eager default stays.
#
#   scripts/gpu_check.sh [--tiny] [FOLDER]     # FOLDER: default $OUT, else gpu-check
#
# GPU_CHECK_SECONDS (default 360) is the budget.
# --tiny runs the same steps on the CPU at a tiny size (tests/test_gpu_check.py), so that the script cannot rot
# before a GPU is lent. Wheels found in $GPU_WHEELS (default gpu-wheels, made by scripts/prepare_gpu_wheels.sh) are
# installed first, without a registry. A failed step is recorded in FOLDER/summary.txt and the next one still runs;
# the exit status is the number of failed steps. CTranslate2 is left out: its wheels load cuBLAS 12, which a CUDA 13
# machine lacks (the CPU comparison keeps it). Multi30k trained on the GPU: scripts/gpu_multi30k.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
tiny=0
if [[ "${1:-}" == "--tiny" ]]; then tiny=1; shift; fi
out="${1:-${OUT:-gpu-check}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python="${PYTHON:-python}"
logs="$(mktemp -d)"
pack() { tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null; }
trap 'pack; exit 143' TERM INT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
budget=${GPU_CHECK_SECONDS:-$(( tiny ? 1800 : 360 ))}  # seconds for every step; packing the logs takes a second
failed=0
: > "$out/summary.txt"

step() {  # step NAME SECONDS COMMAND...: run it within its limit and the time left, its output in NAME.log
    local name="$1" limit="$2" started=$SECONDS left=$((budget - SECONDS))
    shift 2
    (( limit > left )) && limit=$left
    echo "== $name" >&2
    if (( limit < 10 )); then
        echo "$name: not run, ${left} s left" | tee -a "$out/summary.txt" >&2
        failed=$((failed + 1))
        return
    fi
    printf '+ %s\n' "$*" > "$logs/$name.log"  # the command, first
    timeout "$limit" "$@" >> "$logs/$name.log" 2>&1
    local status=$?
    tail -n 15 "$logs/$name.log" >&2
    echo "$name: exit $status, $((SECONDS - started)) s" | tee -a "$out/summary.txt" >&2
    if (( status != 0 )); then failed=$((failed + 1)); fi
}

wheels="${GPU_WHEELS:-gpu-wheels}"
if compgen -G "$wheels/*.whl" > /dev/null; then
    step install 60 "$python" -m pip install --no-index --find-links "$wheels" "transformers>=5.23,<5.25" num2words
fi
# 30 s on the GPU machine; at --tiny, on a loaded 2-core machine, importing torch and transformers alone took 10 s
# (and past 30 s at load 7): the test's machine gets 180.
step environment "$(( tiny ? 180 : 30 ))" "$python" -c "
import json, platform, sys
sys.path.insert(0, 'scripts')
import torch
from bench import write_json
from vanilla_transformer.environment import run_environment
write_json({**run_environment(), 'cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available(),
            'kernel': platform.release()}, '$out/environment.json')
"

training() {  # training NAME LIMIT CONTESTANTS OPTIONS...: benchmark_training.py's contestants in one interleaved run
    local name="$1" limit="$2" contestants="$3"
    shift 3
    step "$name" "$limit" "$python" scripts/benchmark_training.py "$@" --contestants "$contestants" \
        --output "$out/$name.json"
}
# The CUDA tests: the attention backends' and the micro-batch plan's files whole (their CUDA choices, mocked on the
# CPU, and the real ones), and elsewhere every test skipped without CUDA (its skipif marker), by node id.
whole=(tests/test_sdpa_backends.py tests/test_micro_batches.py)
mapfile -t tests < <(awk -v whole=" ${whole[*]} " 'FNR == 1 { marked = 0 } index(whole, " " FILENAME " ") { nextfile }
    /skipif\(not torch\.cuda\.is_available\(\)/ { marked = 1 }
    marked && /^def test_/ { sub(/\(.*/, "", $2); print FILENAME "::" $2; marked = 0 }' tests/test_*.py)
if (( tiny )); then  # the same steps on the CPU, fp32, at a tiny size, nothing compiled but ours compiled
    p=no c=no limits=(300 600 900 300 300)  # ours compiled: inductor on the CPU, the contestants' own code path
    base=(--device cpu --preset numbers --synthetic-pairs 300 --model-size tiny --vocab-size 400 --max-tokens 512
          --grad-accum 2 --threads 1 --rounds 2 --steps-per-round 2 --warmup-steps 1)
    big=("${base[@]}")
    decoding=(--device cpu --contestants generate marian torch --sizes tiny --vocab-size 300
              --data-dir "$out/no-corpus" --threads 1 --batches 1 --rounds 1 --warmup 1)
    batches=(4 8)
    quick=(--rounds 1 --steps-per-round 1)  # ours compiled: inductor on 2 CPU cores takes minutes per variant
else
    # the CUDA tests, training at base, ours compiled, training at big, each decoding batch: 340 s with the environment
    p=bf16 c=inductor limits=(40 80 130 45 20)
    # wmt14-base: the base model, a 37,000 vocabulary, 4 micro-batches of 12,500 padded tokens a step.
    base=(--device cuda --preset wmt14-base --synthetic-pairs 20000 --rounds 2 --steps-per-round 3 --warmup-steps 3)
    big=(--device cuda --preset wmt14-big --synthetic-pairs 20000 --rounds 2 --steps-per-round 2 --warmup-steps 2)
    decoding=(--device cuda --contestants generate_bf16 marian_bf16 torch_bf16 --sizes base --vocab-size 37000
              --threads 1 --batches 3 --rounds 3 --warmup 2)
    batches=(16 128)
    quick=()
fi
step cuda_tests "${limits[0]}" "$python" -m pytest -q -p no:xdist -rfEsp "${whole[@]}" "${tests[@]}"
trainer="trainer:precision=$p,compile=no,optim=adamw_torch_fused,attn=sdpa,cudnn=off"  # the Trainer at its best
training training_base "${limits[1]}" "ours:default ours:default,micro=fixed torch:precision=$p,compile=$c $trainer" \
    "${base[@]}"
# Ours compiled, three ways, against the eager default in one interleaved run; profiled after its timed rounds.
compiled="ours:precision=$p,compile=inductor,adam=fused,attn"
TORCH_LOGS=recompiles,graph_breaks training training_compiled "${limits[2]}" \
    "ours:default $compiled=sdpa $compiled=eager $compiled=sdpa,cudnn=only" "${base[@]}" "${quick[@]}" --profile-steps 2
training training_big "${limits[3]}" "ours:default torch:precision=$p,compile=$c" "${big[@]}"
for batch in "${batches[@]}"; do
    step "decoding_batch$batch" "${limits[4]}" "$python" scripts/benchmark_decoding.py --batch-size "$batch" \
        --output "$out/decoding_batch$batch.json" "${decoding[@]}"
done
echo "failed steps: $failed" | tee -a "$out/summary.txt" >&2
pack
rm -rf "$logs"
exit "$failed"
