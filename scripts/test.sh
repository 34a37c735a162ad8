#!/usr/bin/env bash
# Install hetsched with every extra into .venv and run lint, type checks and the whole test suite,
# integration tests included (they start a real llama.cpp server process themselves).
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# llama.cpp's native build dies with "Illegal instruction" on CPUs that advertise AMX; build portably.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
python -m pip install --quiet -e '.[llm,bench,test,dev]'
ruff check src tests benchmarks
mypy
python -m pytest -n 2 "$@"
