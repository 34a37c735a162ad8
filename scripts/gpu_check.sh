#!/usr/bin/env bash
# The checks that need a GPU, in one script, for a machine with CUDA (see docs/tools.md):
#   1. profile the `full` tools of two scenarios on the GPU (and the CPU) into cards;
#   2. write a fan-out scenario and a VRAM-constrained three-way scenario over those cards (the
#      budget: 55% of what all-GPU needs, so all-GPU OOMs and queueing matters);
#   3. run each through the local executor under all-GPU, the agentic policy and the oracle's
#      mapping (the simulator's optimum for the profiled cards);
#   4. write cards, run JSON, Chrome traces, the run store and a short report to one folder.
# Usage: bash scripts/gpu_check.sh [OUT_DIR]          (default OUT_DIR: gpu-check-out)
# Settings (environment): DEVICE=cuda SIZE=full RUNS=5 WARMUP=1 LOADS=2 ROUNDS=3 CPU_THREADS=(all cores)
# On a machine without CUDA, DEVICE=standin SIZE=tiny runs the same steps on the stand-in device
# (that is how the script itself is tested). Expect ~10 minutes with the full tools, most of it
# their CPU side (the 1B LLM generating 48 tokens on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check-out}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-full}
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-1}
LOADS=${LOADS:-2}
ROUNDS=${ROUNDS:-3}
CPU_THREADS=${CPU_THREADS:-$(python -c 'import os; print(len(os.sched_getaffinity(0)))')}
mkdir -p "$OUT"
HETSCHED=(python -m hetsched)

if [[ "$DEVICE" == cuda* ]]; then
  python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "torch sees no CUDA device: run on a GPU machine, or DEVICE=standin SIZE=tiny")'
  (nvidia-smi || true) > "$OUT/nvidia-smi.txt" 2>&1
fi
python -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' | tee "$OUT/versions.txt"

FANOUT_TOOLS=(text_chunker bert_base e5_large reranker resnet50 doc_merger)
VRAM_TOOLS=(whisper_small ocr e5_large llama_1b)
echo "== 1. profile (${SIZE}, ${DEVICE})"
"${HETSCHED[@]}" profile "${FANOUT_TOOLS[@]}" "${VRAM_TOOLS[@]}" --size "$SIZE" --device "$DEVICE" \
  --runs "$RUNS" --warmup "$WARMUP" --loads "$LOADS" --cpu-threads "$CPU_THREADS" -o "$OUT/cards.yaml" --no-progress \
  | tee "$OUT/profile.txt"

echo "== 2. scenarios over the profiled cards"
python - "$OUT" "$CPU_THREADS" <<'PY'
import sys
from pathlib import Path

import yaml

from hetsched.model.files import load_tool_library

out, cores = Path(sys.argv[1]), int(sys.argv[2])
cards = load_tool_library(out / "cards.yaml")
fan = ["bert_base", "e5_large", "reranker", "resnet50"]
fanout = {
    "name": "gpu_fanout", "mode": "binary", "tools": "cards.yaml",
    "description": "Fan-out: a chunker feeds four models in parallel; a merger joins them",
    "machine": {"name": "gpu-check", "cpu_cores": cores,
                "vram_budget_mb": round(2 * sum(cards[t].vram_mb for t in fan) + 1, 1)},
    "nodes": [{"id": "A", "tool": "text_chunker"}, *({"id": chr(66 + i), "tool": t} for i, t in enumerate(fan)),
              {"id": "F", "tool": "doc_merger"}],
    "edges": [f"A -> {chr(66 + i)}" for i in range(4)] + [f"{chr(66 + i)} -> F" for i in range(4)],
}
vram = ["whisper_small", "ocr", "e5_large", "llama_1b"]
need = sum(cards[t].vram_mb for t in vram)
vram_sc = {
    "name": "gpu_vram", "mode": "three_way", "tools": "cards.yaml",
    "description": "Spoken question over documents: ASR and OCR in parallel, embed, answer with a 1B LLM",
    "machine": {"name": "gpu-check", "cpu_cores": cores,
                "vram_budget_mb": round(max(0.55 * need, max(cards[t].vram_mb for t in vram) * 1.05), 1)},
    "nodes": [{"id": "A", "tool": "whisper_small"}, {"id": "B", "tool": "ocr"}, {"id": "C", "tool": "e5_large"},
              {"id": "D", "tool": "llama_1b"}],
    "edges": ["A -> C", "B -> C", "C -> D"],
}
for doc in (fanout, vram_sc):
    (out / f"{doc['name']}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    print(f"wrote {out / (doc['name'] + '.yaml')} (budget {doc['machine']['vram_budget_mb']} MB)")
PY

echo "== 3. real runs: all-GPU, agentic, the oracle's mapping"
for sc in gpu_fanout gpu_vram; do
  for policy in all-gpu agentic oracle; do
    echo "-- $sc / $policy"
    "${HETSCHED[@]}" run "$OUT/$sc.yaml" --executor local -X "device=\"$DEVICE\"" -X "size=\"$SIZE\"" \
      --policy "$policy" --rounds "$ROUNDS" --store "$OUT/runs.sqlite" --trace "$OUT/trace_${sc}_${policy}.json" \
      --json > "$OUT/run_${sc}_${policy}.json"
  done
done

echo "== 4. report"
python - "$OUT" <<'PY'
import json
import sys
from pathlib import Path

from hetsched.model.files import load_scenario, load_tool_library

out = Path(sys.argv[1])
cards = load_tool_library(out / "cards.yaml")
first = next(iter(cards.values())).provenance
lines = ["# GPU check", "", f"GPU figures measured on: {first.gpu} (device: {first.device})", f"CPU: {first.cpu}",
         f"Software: {first.software}", "", "## Cards", "",
         "| tool | cpu_ms | gpu_ms | load_ms | vram_mb | gpu_util | speedup |", "|---|---:|---:|---:|---:|---:|---:|"]
for name, c in cards.items():
    if c.base is None:
        sp = "-" if c.speedup is None else f"{c.speedup:.1f}x"
        lines.append(f"| {name} | {c.cpu_ms:.1f} | {c.gpu_ms or '-'} | {c.load_ms:.1f} | {c.vram_mb:.0f} | "
                     f"{c.gpu_util:.2f} | {sp} |")
lines += ["", "## Runs (best feasible round; the reference is the simulator's optimum for these cards)", "",
          "| scenario | policy | best real E2E ms | reference (sim) ms | feasible rounds | infeasible kinds |",
          "|---|---|---:|---:|---:|---|"]
notes: set[str] = set()
for sc in ("gpu_fanout", "gpu_vram"):
    budget = load_scenario(out / f"{sc}.yaml").machine.vram_budget_mb
    for policy in ("all-gpu", "agentic", "oracle"):
        data = json.loads((out / f"run_{sc}_{policy}.json").read_text())
        ok = [r["e2e_ms"] for r in data["rounds"] if r["feasible"]]
        kinds = sorted({r["infeasible_kind"] for r in data["rounds"] if not r["feasible"]})
        ref = data["reference"]["e2e_ms"] if data["reference"] else None
        lines.append(f"| {sc} (budget {budget:g} MB) | {policy} | {min(ok):.1f} | "
                     f"{'-' if ref is None else f'{ref:.1f}'} | {len(ok)}/{len(data['rounds'])} | "
                     f"{', '.join(kinds) or '-'} |" if ok else
                     f"| {sc} (budget {budget:g} MB) | {policy} | - | - | 0/{len(data['rounds'])} | {', '.join(kinds)} |")
    notes |= {n for p in ("all-gpu", "agentic", "oracle")
              for n in json.loads((out / f"run_{sc}_{p}.json").read_text())["notes"]}
lines += ["", *(f"Note: {n}" for n in sorted(notes))]
(out / "report.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "done: cards, scenarios, run JSON, traces (open in ui.perfetto.dev), runs.sqlite and report.md in $OUT"
