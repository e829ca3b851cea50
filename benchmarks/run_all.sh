#!/usr/bin/env bash
# Every processors benchmark of BENCHMARKS.md in one run (same machine, same minute):
# CPU speed ours vs the reference (mineru-html 1.1.2), token reduction, and quality.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
PY=.venv/bin/python
OUT=${OUT:-out/bench}
mkdir -p "$OUT"
echo "# $(date -u +%FT%TZ) on $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

bash benchmarks/setup_reference.sh >/dev/null
.cache/ref-venv/bin/python benchmarks/reference_cpu.py --data "$DATA/articles_dev.jsonl" \
  --repeat "${REPEAT_REF:-1}" --no-tracemalloc --json > "$OUT/reference_cpu.json"
$PY benchmarks/processors_cpu.py --data "$DATA/articles_dev.jsonl" --repeat "${REPEAT:-3}" \
  --json > "$OUT/processors_cpu.json"
$PY - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
ref = json.load(open(f"{out}/reference_cpu.json"))
ours = json.load(open(f"{out}/processors_cpu.json"))
ref_rate = ref["pages_per_s"]
print(f"CPU path, one core: ours {ours['pages_per_s']:.1f} pages/s, reference {ref_rate:.2f} pages/s,"
      f" ratio {ours['pages_per_s'] / ref_rate:.1f}x")
print(f"  ours pre {ours['pre_ms']}  post {ours['post_ms']}")
print(f"  peak RSS ours {ours['peak_rss_mib']:.0f} MiB; tracemalloc/page {ours['tracemalloc_per_page']}")
print(f"  tokens {ours['tokens']}")
PY

$PY benchmarks/parsers.py --data "$DATA/articles_dev.jsonl"

for file in webmainbench_sample articles_dev publishers_dev; do
  for labeller in oracle heuristic fallback; do
    if [ "$labeller" = oracle ] && [ "$file" != webmainbench_sample ]; then continue; fi
    .venv/bin/dripstream eval "$DATA/$file.jsonl" --labeller "$labeller" --quiet --json \
      > "$OUT/eval_${file}_${labeller}.json" 2>/dev/null
    $PY -c "import json,sys; r=json.load(open(sys.argv[1])); subs={}
[subs.setdefault(p['subset'],[]).append(p['f1']) for p in r['pages']]
print(f\"eval {sys.argv[2]:20s} {sys.argv[3]:9s} mean F1 {r['mean_f1']:.4f} P {r['mean_precision']:.4f} R {r['mean_recall']:.4f}\",
      ' '.join(f'{k}={sum(v)/len(v):.4f}' for k,v in subs.items() if len(subs)>1))" \
      "$OUT/eval_${file}_${labeller}.json" "$file" "$labeller"
  done
done

# Learned labeller (BENCHMARKS.md, "Learned CPU labeller"): label derivation check and
# ceiling, grouped cross-validation beside trafilatura / rs-trafilatura, one-core speed.
$PY -c "import rs_trafilatura" 2>/dev/null || $PY -m pip install -q -e '.[bench]'
$PY benchmarks/learned_labeller.py labels --data "$DATA" --out "$OUT/learned"
$PY benchmarks/learned_labeller.py cv --data "$DATA" --out "$OUT/learned"
$PY benchmarks/learned_labeller.py speed --data "$DATA" --out "$OUT/learned" --repeat 3
$PY benchmarks/learned_labeller.py speed --data "$DATA" --out "$OUT/learned" --repeat 3 --file wcxb_dev.jsonl.xz --every 5
$PY benchmarks/learned_labeller.py stages --data "$DATA" --out "$OUT/learned" --repeat 3
$PY benchmarks/label_rules.py cache --data "$DATA" --out "$OUT/learned"
$PY benchmarks/label_rules.py rules --data "$DATA" --out "$OUT/learned" > "$OUT/learned/rules.jsonl"
