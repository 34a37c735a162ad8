#!/usr/bin/env bash
# Install hetsched with every extra into .venv and run lint, type checks and the whole test suite,
# integration tests included (they start a real llama.cpp server process themselves, and a real
# two-node Ray cluster inside a loopback-only network namespace: run as root, or those skip).
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# llama.cpp's native build dies with "Illegal instruction" on CPUs that advertise AMX; build portably.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
# the [tools] extra needs torch: install the CPU build first (a plain `torch` requirement may pull a
# multi-GB CUDA build), then every extra
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e '.[llm,bench,tools,ray,langgraph,search,test,dev]'
ruff check src tests benchmarks
mypy
python -m pytest -n 2 --maxschedchunk 1 "$@"
