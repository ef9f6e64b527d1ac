#!/usr/bin/env bash
# The whole CPU recipe in one command, resumable: ICWBench's held-out questions and keys -> D_cs -> SDLP -> GRPO
# -> ICWBench of the base model, +SDLP and +SDLP+GRPO -> the table of stages (paired tests) -> the model card.
# The three training commands are those of docs/training.md ("The CPU recipe"), with the shipped configs; every
# step resumes where it stopped (synthesis row by row, training from its newest checkpoint, ICWBench answer by
# answer), so after an interruption the same command goes on.
#
#   bash scripts/speedrun.sh                      # the documented run: ~12-14 h on a 2-core CPU
#   OUT=runs/try SDLP_STEPS=20 GRPO_STEPS=2 NUM_H1=8 NUM_H0=4 NUM_EVAL=10 EVAL_TOKENS=48 bash scripts/speedrun.sh
#
# Knobs (environment; unset: the shipped configs' values): OUT=runs/speedrun, MODEL=smollm2 (or a local model
# folder), TOKENIZER=smollm2 (the tokenizer ICWBench's keys are built for), FAMILIES="tsp wip sa", NUM_H1, NUM_H0,
# TRAIN_TOKENS (answer length of D_cs, SDLP and GRPO), SDLP_STEPS, GRPO_STEPS, GRPO_PROMPTS (a step's prompts, 4
# completions each, generated together, one micro-batch a prompt), NUM_EVAL=100 (held-out questions per family),
# EVAL_TOKENS=192, SAVE_STEPS.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ACCELERATE=${ACCELERATE:-.venv/bin/accelerate}
ICW=${ICW:-.venv/bin/icw}
OUT=${OUT:-runs/speedrun}
MODEL=${MODEL:-smollm2}
TOKENIZER=${TOKENIZER:-smollm2}
FAMILIES=${FAMILIES:-"tsp wip sa"}
NUM_EVAL=${NUM_EVAL:-100}
EVAL_TOKENS=${EVAL_TOKENS:-192}
CONFIGS=recipes/configs/smollm2-135m
LAUNCH=("$ACCELERATE" launch --config_file recipes/accelerate_configs/cpu.yaml)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
say() { echo "speedrun: $*" >&2; }

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

finished() { [ -f "$1/icw_training.json" ] && "$PY" -c "import json,sys; sys.exit(not json.load(open('$1/icw_training.json'))['progress']['final'])"; }

say "1/6 ICWBench's held-out questions and keys ($OUT/icwbench)"
[ -f "$OUT/icwbench/README.md" ] || "$ICW" bench build --out "$OUT/icwbench" --tokenizer "$TOKENIZER" --families $FAMILIES \
  --num-test "$NUM_EVAL" --pool-size 300 --quiet
say "2/6 cold-start data D_cs ($OUT/dcs)"
[ -f "$OUT/dcs/data.parquet" ] || "$PY" recipes/synthesize.py --config "$CONFIGS/synthesize.yaml" "${synth[@]}"
say "3/6 SDLP ($OUT/sdlp)"
finished "$OUT/sdlp" || "${LAUNCH[@]}" recipes/sdlp.py --config "$CONFIGS/sdlp.yaml" "${sdlp[@]}"
say "4/6 GRPO ($OUT/grpo)"
finished "$OUT/grpo" || "${LAUNCH[@]}" recipes/grpo.py --config "$CONFIGS/grpo.yaml" "${grpo[@]}"

say "5/6 ICWBench of every stage ($OUT/eval)"
stages=(base sdlp grpo)
models=("$MODEL" "$OUT/sdlp" "$OUT/grpo")
for i in 0 1 2; do
  run="$OUT/eval/${stages[$i]}"
  "$ICW" bench run --dataset "$OUT/icwbench" --out "$run" --model "${models[$i]}" --base_model "$MODEL" \
    --families $FAMILIES --limit "$NUM_EVAL" --max_new_tokens "$EVAL_TOKENS" --batch_size 32 --ppl_models "$MODEL" \
    --no_progress
  "$ICW" bench report "$run" --no-figures > /dev/null
done

say "6/6 the table of stages ($OUT/stages.md) and the model card ($OUT/grpo/README.md)"
"$ICW" bench compare "$OUT/eval/base" "$OUT/eval/sdlp" "$OUT/eval/grpo" --labels Base +SDLP +SDLP+GRPO --out "$OUT"
"$ICW" hub model-card "$OUT/eval/grpo/results.json" --out "$OUT/grpo" --stages "$OUT/stages.json" > /dev/null
say "done: $OUT/stages.md, $OUT/grpo/README.md"
