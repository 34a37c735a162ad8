#!/usr/bin/env bash
# Install hetsched with every extra into .venv and run lint, type checks and the whole test suite,
# integration tests included (they start a real llama.cpp server process themselves, and a real
# two-node Ray cluster inside a loopback-only network namespace: run as root, or those skip).
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
# Byte-compile on first import, not at install: pip compiles every module of every package it installs
# (torch, ray, transformers: the extras took 189 s with it, 80 s without, side by side on 2 loaded cores),
# and the tests import a fraction of them (their first import compiles them once, about 12 s).
# That needs bytecode writes on: an environment with PYTHONDONTWRITEBYTECODE set would otherwise recompile
# hetsched and its imports in every process a test starts.
unset PYTHONDONTWRITEBYTECODE
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# llama.cpp's native build dies with "Illegal instruction" on CPUs that advertise AMX; build portably.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
# the [tools] extra needs torch: install the CPU build first (a plain `torch` requirement may pull a
# multi-GB CUDA build), then every extra
python -m pip install --quiet --no-compile torch==2.13.0
python -m pip install --quiet --no-compile -e '.[llm,bench,tools,ray,langgraph,search,test,dev]'
ruff check src tests benchmarks
mypy
python -m pytest -n 2 --maxschedchunk 1 "$@"
