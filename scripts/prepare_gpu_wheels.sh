#!/usr/bin/env bash
# The wheels scripts/gpu_check.sh and gpu_multi30k.sh install on a GPU machine that reaches no package registry:
# transformers within pyproject's bounds and its tokenizers (the machine's image has huggingface_hub, safetensors and
# the rest: seen on the H200 of 2026-11-27) and num2words (the tests' data; its one dependency, docopt, serves only
# its command line and has no wheel). CTranslate2 is not among them: its wheels load cuBLAS 12, which a CUDA 13
# machine lacks. Run it where a registry is reachable; carry the folder to the GPU machine (never commit it). The
# device tool carries 64 MiB with the working tree, so the folder must stay within 60 MiB.
#
#   PYTHON_VERSION=3.12 scripts/prepare_gpu_wheels.sh [FOLDER]     # default FOLDER: gpu-wheels
set -euo pipefail
folder="${1:-gpu-wheels}"
python="${PYTHON:-python}"
"$python" -m pip download --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$folder" "transformers>=5.23,<5.25" "tokenizers>=0.22" "num2words>=0.5.13"
size=$(du -sb "$folder" | cut -f1)
echo "$folder: $((size / 1048576)) MiB"
if (( size > 60 * 1048576 )); then
    echo "over 60 MiB: remove older versions from $folder" >&2
    exit 1
fi
