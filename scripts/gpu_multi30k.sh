#!/usr/bin/env bash
# Multi30k English->German trained on the GPU, one command in at most 5 minutes: `train --preset multi30k` on the
# corpus read in place ($MULTI30K, default ../shared/data/multi30k, else shared/data/multi30k), MINUTES (3.5) of
# training, the checkpoint average kept or not on validation BLEU (the preset's rule), scored on test_2016_flickr.
# FOLDER receives what a committed run holds (docs/results/gpu/<date>-<gpu>/multi30k-en-de/): the run's results,
# metrics and settings as the run folder names them (RunLayout), run.json (the command, its wall time, the machine),
# summary.txt and the run's log in logs.tgz. The run folder itself (checkpoints, model) is temporary and removed.
#
#   scripts/gpu_multi30k.sh [--tiny] [FOLDER]     # FOLDER: default $OUT, else gpu-multi30k
#
# --tiny trains a tiny model for a few steps on the CPU (tests/test_gpu_check.py), on $MULTI30K's files. Wheels in
# $GPU_WHEELS are installed first, as scripts/gpu_check.sh does. The exit status is the run's.
set -uo pipefail
cd "$(dirname "$0")/.."
tiny=0
if [[ "${1:-}" == "--tiny" ]]; then tiny=1; shift; fi
out="${1:-${OUT:-gpu-multi30k}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
data="${MULTI30K:-}"
for candidate in ../shared/data/multi30k shared/data/multi30k; do
    [[ -z "$data" && -f "$candidate/train.en" ]] && data="$candidate"
done
if [[ -z "$data" || ! -f "$data/train.en" ]]; then
    echo "gpu_multi30k.sh: no Multi30k files (train.en, ...) in ${data:-../shared/data/multi30k}; set MULTI30K" >&2
    exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
wheels="${GPU_WHEELS:-gpu-wheels}"
if compgen -G "$wheels/*.whl" > /dev/null; then
    "$python" -m pip install --no-index --find-links "$wheels" "transformers>=5.23,<5.25" > "$work/install.log" 2>&1
fi
command=(-c "import sys; from vanilla_transformer.cli import main; sys.exit(main())" train --preset multi30k --data-dir "$data" --output-dir "$work/run")
if (( tiny )); then
    command+=(--model tiny --vocab-size 300 --max-tokens 512 --max-steps 6 --warmup-steps 2 --eval-every 3
              --save-every 3 --keep-checkpoints 2 --average-checkpoints 2 --mixed-precision no --dynamo-backend no
              --num-threads 1)
else
    command+=(--max-train-minutes "${MINUTES:-3.5}")
fi
started=$SECONDS
timeout $(( tiny ? 900 : 290 )) "$python" "${command[@]}" > "$work/train.log" 2>&1
status=$?
tail -n 20 "$work/train.log" >&2
"$python" - "$work/run" "$out" "$status" "$((SECONDS - started))" "${command[*]:2}" <<'EOF'
import shutil, sys
from pathlib import Path

sys.path.insert(0, "scripts")
from bench import write_json

from vanilla_transformer.environment import run_environment
from vanilla_transformer.training.run_dir import RunLayout

run, out, status, seconds, command = sys.argv[1:]
layout = RunLayout(run)
copied = [shutil.copy(path, out) for path in (layout.results, layout.metrics, layout.settings) if path.is_file()]
write_json({**run_environment(), "role": "gpu", "command": f"vanilla-transformer {command}",
            "exit_status": int(status), "wall_seconds": int(seconds)}, Path(out) / "run.json")
summary = f"multi30k: exit {status}, {seconds} s; {', '.join(Path(path).name for path in copied) or 'no run files'}"
(Path(out) / "summary.txt").write_text(summary + "\n", encoding="utf-8")
print(summary, file=sys.stderr)
EOF
tar czf "$out/logs.tgz" -C "$work" train.log
exit "$status"
