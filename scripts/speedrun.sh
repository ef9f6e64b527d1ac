#!/usr/bin/env bash
# The whole CPU recipe in one command, resumable: ICWBench's held-out questions and keys -> D_cs -> SDLP -> GRPO
# -> ICWBench of the base model, +SDLP and +SDLP+GRPO -> the table of stages (paired tests) -> the model card.
# The three training commands are those of docs/training.md ("The CPU recipe"), with the shipped configs; every
# step resumes where it stopped (synthesis row by row, training from its newest checkpoint, ICWBench answer by
# answer), so after an interruption the same command goes on. Everything is written under a base directory
# outside the work tree ($ICW_RUNS, default ~/.cache/icw/runs), which survives a fresh checkout; the report card
# ($OUT/report.md) records each stage's wall time, summed over resumptions, and the machine and precision.
#
#   bash scripts/speedrun.sh                      # the joint model (TSP, WIP, SA): ~/.cache/icw/runs/speedrun
#   PRESET=wip bash scripts/speedrun.sh           # a WIP model: 700 SDLP + 50 GRPO steps, ~/.cache/icw/runs/speedrun-wip
#   OUT=/tmp/try SDLP_STEPS=20 GRPO_STEPS=2 NUM_H1=8 NUM_H0=4 NUM_EVAL=10 EVAL_TOKENS=48 bash scripts/speedrun.sh
#
# Knobs (environment; unset: the shipped configs' values): PRESET (wip), OUT=$ICW_RUNS/speedrun[-PRESET],
# MODEL=smollm2 (or a local model folder), TOKENIZER=smollm2 (the tokenizer ICWBench's keys are built for),
# FAMILIES="tsp wip sa", NUM_H1, NUM_H0, TRAIN_TOKENS (answer length of D_cs, SDLP and GRPO), SDLP_STEPS,
# GRPO_STEPS, GRPO_PROMPTS (a step's prompts, 4 completions each, generated together, one micro-batch a prompt),
# NUM_EVAL=100 (held-out questions per family), EVAL_TOKENS=192, SAVE_STEPS. ICW_PRECISION=fp32|bf16 overrides
# the precision, which is otherwise bf16 autocast where the CPU has native bf16 and fp32 where it has not.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ACCELERATE=${ACCELERATE:-.venv/bin/accelerate}
ICW=${ICW:-.venv/bin/icw}
case "${PRESET:-}" in
  "") ;;
  wip) FAMILIES=${FAMILIES:-wip} SDLP_STEPS=${SDLP_STEPS:-700} GRPO_STEPS=${GRPO_STEPS:-50} ;;
  *) echo "speedrun: PRESET=$PRESET: the presets are wip (or leave PRESET unset for the joint model)" >&2; exit 2 ;;
esac
OUT=${OUT:-${ICW_RUNS:-${ICW_CACHE:-$HOME/.cache/icw}/runs}/speedrun${PRESET:+-$PRESET}}
MODEL=${MODEL:-smollm2}
TOKENIZER=${TOKENIZER:-smollm2}
FAMILIES=${FAMILIES:-"tsp wip sa"}
NUM_EVAL=${NUM_EVAL:-100}
EVAL_TOKENS=${EVAL_TOKENS:-192}
CONFIGS=recipes/configs/smollm2-135m
LAUNCH=("$ACCELERATE" launch --config_file recipes/accelerate_configs/cpu.yaml)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# torch's threads per process: the physical cores unless set (accelerate launch would choose the same, with a notice)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$("$PY" -c "import psutil; print(psutil.cpu_count(logical=False) or 1)")}
mkdir -p "$OUT"
say() { echo "speedrun: $*" >&2; }
MACHINE=$("$PY" -c "import json; from icw.precision import machine; print(json.dumps(machine()))")
say "writing to $OUT; $MACHINE"
# timed STAGE COMMAND...: run a stage and append its wall time and exit status to $OUT/timings.jsonl, an
# interrupted stage's too (the report card sums every run of a stage); then exit as the stage did
timed() {
  local stage=$1 start=$SECONDS status=0
  shift
  "$@" || status=$?
  printf '{"stage": "%s", "seconds": %d, "status": %d, "ended": "%s", "machine": %s}\n' "$stage" \
    $((SECONDS - start)) "$status" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$MACHINE" >> "$OUT/timings.jsonl"
  return "$status"
}

# overrides of the shipped configs, only for the knobs that are set
synth=(--model_name_or_path "$MODEL" --families $FAMILIES --output_dir "$OUT/dcs")
sdlp=(--model_name_or_path "$MODEL" --dataset_name "$OUT/dcs" --output_dir "$OUT/sdlp" --families $FAMILIES)
grpo=(--model_name_or_path "$OUT/sdlp" --dataset_name "$OUT/dcs" --output_dir "$OUT/grpo" --families $FAMILIES)
[ -n "${NUM_H1:-}" ] && synth+=(--num_h1 "$NUM_H1")
[ -n "${NUM_H0:-}" ] && synth+=(--num_h0 "$NUM_H0")
if [ -n "${TRAIN_TOKENS:-}" ]; then
  synth+=(--max_new_tokens "$TRAIN_TOKENS")
  sdlp+=(--max_response_length $((TRAIN_TOKENS + 1)))
  grpo+=(--max_completion_length "$TRAIN_TOKENS" --min_completion_tokens $((TRAIN_TOKENS / 2)))
fi
[ -n "${SDLP_STEPS:-}" ] && sdlp+=(--max_steps "$SDLP_STEPS")
[ -n "${GRPO_STEPS:-}" ] && grpo+=(--max_steps "$GRPO_STEPS")
[ -n "${GRPO_PROMPTS:-}" ] && grpo+=(--per_device_train_batch_size 4 --gradient_accumulation_steps "$GRPO_PROMPTS" --num_generations 4)
[ -n "${SAVE_STEPS:-}" ] && sdlp+=(--save_steps "$SAVE_STEPS") && grpo+=(--save_steps "$SAVE_STEPS")

finished() { "$PY" -c "import sys; from icw.runs import finished_training; sys.exit(not finished_training(sys.argv[1]))" "$1"; }

say "1/6 ICWBench's held-out questions and keys ($OUT/icwbench)"
[ -f "$OUT/icwbench/README.md" ] || timed icwbench "$ICW" bench build --out "$OUT/icwbench" --tokenizer "$TOKENIZER" --families $FAMILIES \
  --num-test "$NUM_EVAL" --pool-size 300 --quiet
say "2/6 cold-start data D_cs ($OUT/dcs)"
[ -f "$OUT/dcs/data.parquet" ] || timed synthesis "$PY" recipes/synthesize.py --config "$CONFIGS/synthesize.yaml" "${synth[@]}"
say "3/6 SDLP ($OUT/sdlp)"
finished "$OUT/sdlp" || timed sdlp "${LAUNCH[@]}" recipes/sdlp.py --config "$CONFIGS/sdlp.yaml" "${sdlp[@]}"
say "4/6 GRPO ($OUT/grpo)"
finished "$OUT/grpo" || timed grpo "${LAUNCH[@]}" recipes/grpo.py --config "$CONFIGS/grpo.yaml" "${grpo[@]}"

say "5/6 ICWBench of every stage ($OUT/eval)"
stages=(base sdlp grpo)
models=("$MODEL" "$OUT/sdlp" "$OUT/grpo")
for i in 0 1 2; do
  run="$OUT/eval/${stages[$i]}"
  timed "eval-${stages[$i]}" "$ICW" bench run --dataset "$OUT/icwbench" --out "$run" --model "${models[$i]}" --base_model "$MODEL" \
    --families $FAMILIES --limit "$NUM_EVAL" --max_new_tokens "$EVAL_TOKENS" --batch_size 32 --ppl_models "$MODEL" \
    --no_progress
  "$ICW" bench report "$run" --no-figures > /dev/null
done

say "6/6 the table of stages ($OUT/stages.md) and the model card ($OUT/grpo/README.md)"
"$ICW" bench compare "$OUT/eval/base" "$OUT/eval/sdlp" "$OUT/eval/grpo" --labels Base +SDLP +SDLP+GRPO --out "$OUT"
"$ICW" hub model-card "$OUT/eval/grpo/results.json" --out "$OUT/grpo" --stages "$OUT/stages.json" \
  --timings "$OUT/timings.jsonl" > /dev/null
# the report card: each stage's wall time summed over every run of this script, and the machines it ran on
"$PY" -c "import sys; from icw.runs import write_report_card; write_report_card(sys.argv[1])" "$OUT"
say "done: $OUT/stages.md, $OUT/grpo/README.md, $OUT/report.md"
