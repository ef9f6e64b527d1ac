#!/usr/bin/env bash
# Launch the ICW demo Space (spaces/icw-demo/app.py) locally and print its URL.
# Sets up .venv first when needed; offline by default (HF_HUB_OFFLINE=0 to allow Hub models).
#
#   bash scripts/launch_space.sh                # http://127.0.0.1:7860, or the next free port
#   bash scripts/launch_space.sh --port 8000 --host 0.0.0.0
#   bash scripts/launch_space.sh --trained-model DIR   # a trained model's column beside the base's (default: the newest
#                                                       # model scripts/speedrun.sh finished under ~/.cache/icw/runs)
#   bash scripts/launch_space.sh --bundle DIR   # write an uploadable Space folder and exit
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }  # the comment block above
BUNDLE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --port) export GRADIO_SERVER_PORT="${2:?--port needs a number}"; shift 2 ;;
    --host) export GRADIO_SERVER_NAME="${2:?--host needs an address}"; shift 2 ;;
    --bundle) BUNDLE="${2:?--bundle needs a folder}"; shift 2 ;;
    --trained-model) export ICW_SPACE_TRAINED_MODEL="${2:?--trained-model needs a model folder or Hub id}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "launch_space.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [ -n "$BUNDLE" ]; then
  # A Space repo's root holds app.py (and the modules beside it), README.md and requirements.txt; icw rides along until
  # it is installable from PyPI.
  mkdir -p "$BUNDLE"
  cp spaces/icw-demo/*.py spaces/icw-demo/README.md spaces/icw-demo/requirements.txt "$BUNDLE"/
  rm -rf "$BUNDLE/icw"
  cp -r src/icw "$BUNDLE/icw"
  find "$BUNDLE/icw" -name __pycache__ -type d -prune -exec rm -rf {} +
  if [ -n "$(find "$BUNDLE" -type l)" ]; then  # a Space repo cannot hold links: every file must be real
    echo "launch_space.sh: the bundle contains symbolic links: $(find "$BUNDLE" -type l | tr '\n' ' ')" >&2
    exit 1
  fi
  echo "Space folder ready: $BUNDLE (upload it with: hf upload <user>/<space> $BUNDLE . --repo-type space)"
  exit 0
fi

if ! .venv/bin/python -c "import icw, gradio" 2>/dev/null; then
  echo "Setting up .venv (first run only) ..."
  bash scripts/setup.sh
fi
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-${HF_HUB_OFFLINE:-1}}"
export GRADIO_ANALYTICS_ENABLED=False GRADIO_SERVER_NAME="${GRADIO_SERVER_NAME:-127.0.0.1}"
echo "Starting the ICW demo Space (loads the model first; Ctrl+C stops it) ..."
exec .venv/bin/python spaces/icw-demo/app.py
