#!/usr/bin/env bash
# One GPU check (issue 36), in at most 8 minutes of an H100: the CUDA tests, the training benchmark at the wmt14-base
# preset's model and tokens per step in bf16 (ours at its best and plain against MarianMT in Seq2SeqTrainer at its
# best and plain: real tokens/s, the ratio, peak memory, MFU), and decoding (our generate() against MarianMT and
# CTranslate2, greedy and beam 4, batches of 16 and 128, bf16). Every results file goes into one folder.
#
#   scripts/gpu_check.sh [--tiny] [FOLDER]     # FOLDER: default $OUT, else gpu-check
#
# --tiny runs the same steps on the CPU at a tiny size (tests/test_gpu_check.py), so that the script cannot rot
# before a GPU is lent. Wheels found in $GPU_WHEELS (default gpu-wheels, made by scripts/prepare_gpu_wheels.sh) are
# installed first, without a registry. A failed step is recorded in FOLDER/summary.txt and the next one still runs;
# the exit status is the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
tiny=0
if [[ "${1:-}" == "--tiny" ]]; then tiny=1; shift; fi
out="${1:-${OUT:-gpu-check}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
failed=0
: > "$out/summary.txt"

step() {  # step NAME SECONDS COMMAND...: run it with a time limit, its output in FOLDER/NAME.log
    local name="$1" limit="$2" started=$SECONDS
    shift 2
    echo "== $name" >&2
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local status=$?
    tail -n 15 "$out/$name.log" >&2
    echo "$name: exit $status, $((SECONDS - started)) s" | tee -a "$out/summary.txt" >&2
    if (( status != 0 )); then failed=$((failed + 1)); fi
}

wheels="${GPU_WHEELS:-gpu-wheels}"
if compgen -G "$wheels/*.whl" > /dev/null; then
    step install 120 "$python" -m pip install --no-index --find-links "$wheels" "transformers>=5.23,<5.25"
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
write_json({**run_environment(), 'cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available()},
           '$out/environment.json')
"

if (( tiny )); then
    step cuda_tests 300 "$python" -m pytest -q -p no:xdist -rs tests/test_precision.py -k cuda
    step training 300 "$python" scripts/benchmark_training.py --device cpu --synthetic-pairs 300 --model-size tiny \
        --vocab-size 400 --max-tokens 512 --grad-accum 2 --threads 1 --rounds 2 --steps-per-round 2 \
        --warmup-steps 1 --contestants "ours:precision=no trainer:precision=no" --output "$out/training.json"
    for batch in 4 8; do
        step "decoding_batch$batch" 300 "$python" scripts/benchmark.py --device cpu --dtype fp32 --size tiny \
            --sections generate --vocab-size 200 --data-dir "$out/no-corpus" --threads 1 --num-batches 1 \
            --repeats 1 --gen-batch-size "$batch" --max-new-tokens 5 --json "$out/decoding_batch$batch.json"
    done
else
    step cuda_tests 120 "$python" -m pytest -q -p no:xdist -rs tests/test_precision.py -k cuda
    # wmt14-base: the base model, a 37,000 vocabulary, 4 micro-batches of 12,500 padded tokens a step.
    step training 330 "$python" scripts/benchmark_training.py --device cuda --preset wmt14-base \
        --synthetic-pairs 20000 --rounds 3 --steps-per-round 3 --warmup-steps 3 --contestants \
        "ours:precision=bf16,compile=inductor,adam=fused ours:precision=no,compile=no,adam=default
         trainer:precision=bf16,compile=inductor,optim=adamw_torch_fused trainer:precision=no,compile=no" \
        --output "$out/training_vs_trainer_cuda_bf16.json"
    for batch in 16 128; do
        step "decoding_batch$batch" 150 "$python" scripts/benchmark.py --device cuda --dtype bf16 --size base \
            --sections generate --vocab-size 37000 --num-batches 2 --repeats 2 --gen-batch-size "$batch" \
            --json "$out/decoding_cuda_bf16_batch$batch.json"
    done
fi
echo "failed steps: $failed" | tee -a "$out/summary.txt" >&2
exit "$failed"
