#!/usr/bin/env bash
# One GPU check, in at most 8 minutes of an H100 or H200: the CUDA tests; the training benchmark at the wmt14-base
# preset's model and tokens per step in bf16, eager (ours against MarianMT in Seq2SeqTrainer, then both under torch's
# profiler: how busy the GPU was, the runtime's launches and waits, the costliest operators and Python functions)
# and compiled; decoding (our generate() against MarianMT and CTranslate2, greedy and beam 4, batches of 16 and 128,
# bf16). The results files and summary.txt go into FOLDER, the steps' logs packed into FOLDER/logs.tgz: at most 8
# files, what the device tool brings back.
#
#   scripts/gpu_check.sh [--tiny] [FOLDER]     # FOLDER: default $OUT, else gpu-check
#
# --tiny runs the same steps on the CPU at a tiny size (tests/test_gpu_check.py), so that the script cannot rot
# before a GPU is lent. Wheels found in $GPU_WHEELS (default gpu-wheels, made by scripts/prepare_gpu_wheels.sh) are
# installed first, without a registry. A failed step is recorded in FOLDER/summary.txt and the next one still runs;
# the exit status is the number of failed steps.
#
# The H200 run of 2026-11-27 (docs/results/gpu/) shaped the order: the step most likely to run out of time
# (compiling the base model twice) comes last, the logs are packed even when a step is cut short, and CTranslate2's
# converter is given host memory (it crashed the decoding steps there).
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
failed=0
: > "$out/summary.txt"

step() {  # step NAME SECONDS COMMAND...: run it with a time limit, its output in FOLDER/NAME.log
    local name="$1" limit="$2" started=$SECONDS
    shift 2
    echo "== $name" >&2
    timeout "$limit" "$@" > "$logs/$name.log" 2>&1
    local status=$?
    tail -n 15 "$logs/$name.log" >&2
    echo "$name: exit $status, $((SECONDS - started)) s" | tee -a "$out/summary.txt" >&2
    if (( status != 0 )); then failed=$((failed + 1)); fi
}

wheels="${GPU_WHEELS:-gpu-wheels}"
if compgen -G "$wheels/*.whl" > /dev/null; then
    step install 120 "$python" -m pip install --no-index --find-links "$wheels" "transformers>=5.23,<5.25"
    step install_num2words 60 "$python" -m pip install --no-index --no-deps --find-links "$wheels" num2words
    # Apart: its wheel is for one Python version; without it the decoding benchmark leaves CTranslate2 out.
    step install_ctranslate2 60 "$python" -m pip install --no-index --find-links "$wheels" ctranslate2
fi
# CTranslate2's CUDA build loads cuBLAS 12 by name: the copy torch's wheel brought, if it brought one.
nvidia="$("$python" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia"
for lib in "$nvidia"/*/lib; do [[ -d "$lib" ]] && export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
step environment 120 "$python" -c "
import json, sys
sys.path.insert(0, 'scripts')
import torch
from bench import write_json
from vanilla_transformer.environment import run_environment
import platform
write_json({**run_environment(), 'cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available(),
            'kernel': platform.release()},
           '$out/environment.json')
"

training() {  # training NAME LIMIT COMPILE OPTIONS...: ours against the Trainer, both bf16 (fp32 with --tiny)
    local name="$1" limit="$2" compile="$3"
    shift 3
    step "$name" "$limit" "$python" scripts/benchmark_training.py "$@" --contestants \
        "ours:precision=$precision,compile=$compile,adam=fused trainer:precision=$precision,compile=$compile,optim=adamw_torch_fused" \
        --output "$out/$name.json"
}
# The CUDA tests collect tests/tiny_model.py, which makes its data with num2words (a wheel above).
tests=(tests/test_precision.py tests/test_ctranslate2.py -k cuda)
if (( tiny )); then
    precision=no
    step cuda_tests 300 "$python" -m pytest -q -p no:xdist -rs "${tests[@]}"
    small=(--device cpu --synthetic-pairs 300 --model-size tiny --vocab-size 400 --max-tokens 512 --grad-accum 2
           --threads 1 --rounds 2 --steps-per-round 2 --warmup-steps 1)
    training training_eager 300 no "${small[@]}" --profile-steps 2
    for batch in 4 8; do
        step "decoding_batch$batch" 300 "$python" scripts/benchmark.py --device cpu --dtype fp32 --size tiny \
            --sections generate --vocab-size 200 --data-dir "$out/no-corpus" --threads 1 --num-batches 1 \
            --repeats 1 --gen-batch-size "$batch" --max-new-tokens 5 --json "$out/decoding_batch$batch.json"
    done
    training training_compiled 300 no "${small[@]}"  # eager at tiny size: the step runs, inductor's minutes spared
else
    precision=bf16
    step cuda_tests 90 "$python" -m pytest -q -p no:xdist -rs "${tests[@]}"
    # wmt14-base: the base model, a 37,000 vocabulary, 4 micro-batches of 12,500 padded tokens a step.
    base=(--device cuda --preset wmt14-base --synthetic-pairs 20000)
    training training_eager 120 no "${base[@]}" --rounds 3 --steps-per-round 3 --warmup-steps 2 --profile-steps 2
    for batch in 16 128; do
        step "decoding_batch$batch" 75 "$python" scripts/benchmark.py --device cuda --dtype bf16 --size base \
            --sections generate --vocab-size 37000 --num-batches 2 --repeats 2 --gen-batch-size "$batch" \
            --json "$out/decoding_batch$batch.json"
    done
    training training_compiled 200 inductor "${base[@]}" --rounds 2 --steps-per-round 3 --warmup-steps 3
fi
echo "failed steps: $failed" | tee -a "$out/summary.txt" >&2
pack
rm -rf "$logs"
exit "$failed"
