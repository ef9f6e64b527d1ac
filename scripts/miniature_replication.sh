#!/usr/bin/env bash
# Miniature replication of the paper's training pipeline (SmolLM2-135M-Instruct, offline; CPU, or a GPU with DEVICE=cuda).
# Documented experiment, not CI. Steps, per family (default: WIP and SA):
#   1. split the bundled questions (src/icw/data/questions.jsonl) into held-out test and train queries;
#   2. synthesize D_cs on the train queries with the logit bias (recipes/synthesize.py);
#   3. train SDLP (accelerate launch recipes/sdlp.py, CPU config);
#   4. evaluate base vs trained on the held-out queries: instructed answers (positives) and plain answers
#      (negatives), verifier z, ROC-AUC and TPR@1%FPR with icw.detection, perplexity of the positives
#      under the base model; a markdown table like the paper's ablation table goes to $OUT/results.md.
#
# Usage:  scripts/miniature_replication.sh                # per-row keys (the paper's setting)
#         FIXED_KEY=1 scripts/miniature_replication.sh    # one key for all rows and for evaluation
# Knobs (environment): FAMILIES="wip sa", NUM_H1=120, NUM_H0=40, NUM_EVAL=40, MAX_NEW_TOKENS=100,
#         EPOCHS=2, LR=3e-5, USE_PEFT=false, OUT=runs/miniature, DEVICE=cpu (or cuda), BATCH=8 (prompts per
#         generate call in synthesis and evaluation). Every step resumes or is skipped when its
#         output exists, so an interrupted run can be restarted with the same command.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ACCELERATE=${ACCELERATE:-.venv/bin/accelerate}
FAMILIES=${FAMILIES:-"wip sa"}
NUM_H1=${NUM_H1:-120}
NUM_H0=${NUM_H0:-40}
NUM_EVAL=${NUM_EVAL:-40}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-100}
EPOCHS=${EPOCHS:-2}
LR=${LR:-3e-5}
USE_PEFT=${USE_PEFT:-false}
FIXED_KEY=${FIXED_KEY:-0}
OUT=${OUT:-runs/miniature}
DEVICE=${DEVICE:-cpu}
BATCH=${BATCH:-8}
if [ "$DEVICE" = cpu ]; then
  TRAIN=("$ACCELERATE" launch --config_file recipes/accelerate_configs/cpu.yaml recipes/sdlp.py --use_cpu true)
else
  TRAIN=("$PY" recipes/sdlp.py --use_cpu false)  # one GPU: a plain process
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"

# 1. held-out test / train queries (ICWBench's own split of the bundled questions)
"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
from icw.bench.dataset import bundled_questions_path, read_questions, split_queries
out = Path(sys.argv[1])
test, train = split_queries(read_questions(bundled_questions_path()), num_test=100, num_train=None, seed=0)
(out / "test_queries.txt").write_text("\n".join(q for q, _ in test) + "\n")
(out / "train_queries.txt").write_text("\n".join(q for q, _ in train) + "\n")
print(f"{len(test)} held-out test queries, {len(train)} train queries")
EOF

KEY_ARGS=()
if [ "$FIXED_KEY" = 1 ]; then KEY_ARGS=(--key_seed 4242); fi

for FAMILY in $FAMILIES; do
  DATA="$OUT/$FAMILY/dcs"
  RUN="$OUT/$FAMILY/sdlp"
  # 2. cold-start data
  "$PY" recipes/synthesize.py --config recipes/configs/smollm2-135m/synthesize.yaml --families "$FAMILY" \
    --queries_file "$OUT/train_queries.txt" --output_dir "$DATA" --num_h1 "$NUM_H1" --num_h0 "$NUM_H0" \
    --max_new_tokens "$MAX_NEW_TOKENS" --device "$DEVICE" --batch_size "$BATCH" "${KEY_ARGS[@]}"
  # 3. SDLP
  if [ ! -f "$RUN/model.safetensors" ] && [ ! -f "$RUN/adapter_model.safetensors" ]; then
    "${TRAIN[@]}" --config recipes/configs/smollm2-135m/sdlp.yaml --dataset_name "$DATA" --output_dir "$RUN" \
      --num_train_epochs "$EPOCHS" --learning_rate "$LR" --use_peft "$USE_PEFT" \
      --max_response_length $((MAX_NEW_TOKENS + 1)) --save_strategy no
  fi
done

# 4. evaluation: base vs SDLP on held-out queries and keys
"$PY" - "$OUT" "$NUM_EVAL" "$MAX_NEW_TOKENS" "$FIXED_KEY" "$DEVICE" "$BATCH" $FAMILIES <<'EOF'
import json, sys
from pathlib import Path
import numpy as np
from icw import ICWKey
from icw.detection import detection_report
from icw.generation import generate_responses
from icw.models import load_model
from icw.train.synthesis import perplexities
from icw.verification import verify

out, n, max_new, fixed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
device, batch, families = sys.argv[5], int(sys.argv[6]), sys.argv[7:]
queries = (out / "test_queries.txt").read_text().splitlines()[:n]
base, tok = load_model("smollm2", device=device)
table = []
for family in families:
    # held-out keys: ICWBench's test seeds (0..n-1) never appear in training (seeds >= 1,000,000)
    seeds = [4242] * n if fixed else list(range(n))
    keys = [ICWKey.create(family, s, tok if family != "sa" else None) for s in seeds]
    for name, path in (("Base", "smollm2"), ("Base + SDLP", str(out / family / "sdlp"))):
        cache = out / family / f"eval-{name.replace(' ', '').replace('+', '_')}.json"
        if cache.exists():
            rec = json.loads(cache.read_text())
        else:
            model = base if path == "smollm2" else load_model(path, device=device)[0]
            pos = generate_responses(model, tok, queries, keys, "instruction", max_new_tokens=max_new,
                                     batch_size=batch, progress=f"{family} {name} instructed")
            neg = generate_responses(model, tok, queries, None, "plain", max_new_tokens=max_new, batch_size=batch,
                                     progress=f"{family} {name} plain")
            rec = {"pos": pos, "neg": neg,
                   "z_pos": [r.z_score for r in verify(pos, keys, tok, num_null_keys=1)],
                   "z_neg": [r.z_score for r in verify(neg, keys, tok, num_null_keys=1)],
                   "ppl": perplexities(base, tok, queries, pos)}
            cache.write_text(json.dumps(rec))
        rep = detection_report(rec["z_pos"], rec["z_neg"], num_bootstrap=500)
        ppl = [p for p in rec["ppl"] if np.isfinite(p)]
        table.append((family.upper(), name, rep.auc, rep.auc_ci, rep.tpr, float(np.mean(rec["z_pos"])),
                      float(np.mean(rec["z_neg"])), float(np.median(ppl))))
lines = [f"Miniature replication ({'one fixed key' if fixed else 'held-out per-query keys'}; {n} held-out queries, "
         f"SmolLM2-135M-Instruct, {max_new} new tokens)", "",
         "| Family | Model | AUC (95% CI) | TPR@1%FPR | mean z instructed | mean z plain | median PPL (base model) |",
         "|---|---|---|---|---|---|---|"]
for fam, name, auc, ci, tpr, zp, zn, ppl in table:
    lines.append(f"| {fam} | {name} | {auc:.3f} ({ci[0]:.2f}-{ci[1]:.2f}) | {tpr:.3f} | {zp:.2f} | {zn:.2f} | {ppl:.1f} |")
(out / "results.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
