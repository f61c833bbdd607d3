#!/usr/bin/env bash
# The wheels scripts/gpu_check.sh installs on a GPU machine that reaches no package registry: transformers within
# pyproject's bounds, its hub and tokenizers, and CTranslate2 (its PyPI wheel has the CUDA 12 build). Run it where
# a registry is reachable; carry the folder to the GPU machine (never commit it). The folder must stay within
# 64 MiB, so CTranslate2 comes for one Python version: the GPU machine's (PYTHON_VERSION, default 3.12).
#
#   PYTHON_VERSION=3.12 scripts/prepare_gpu_wheels.sh [FOLDER]     # default FOLDER: gpu-wheels
set -euo pipefail
folder="${1:-gpu-wheels}"
python="${PYTHON:-python}"
"$python" -m pip download --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$folder" "transformers>=5.23,<5.25" "huggingface_hub>=1.0" "tokenizers>=0.22" "ctranslate2>=4.5"
size=$(du -sb "$folder" | cut -f1)
echo "$folder: $((size / 1048576)) MiB"
if (( size > 64 * 1048576 )); then
    echo "over 64 MiB: remove older versions from $folder" >&2
    exit 1
fi
