#!/usr/bin/env bash
# Install hetsched into .venv (core + plotting, no GPU, no LLM server) and run the main job on the
# embedded defaults. Usage: bash scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e '.[bench]'
hetsched run fanout --policy all-gpu --rounds 3
hetsched run fanout --policy oracle --rounds 3
hetsched run vram_3way --policy all-gpu --rounds 1
hetsched run vram_3way --policy oracle --rounds 3 --trace out/vram_3way.trace.json
