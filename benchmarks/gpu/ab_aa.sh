#!/usr/bin/env bash
# ab A/A sessions on the H200 (does the gpu-1 probe hold still between
# processes of the same code; what does the gate say?). GPU0 mlp-deep full fp32 forward,
# GPU1 GPT-2 full bf16 decode; 6 rounds each, warm shared compile cache per GPU.
set -uo pipefail
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PY:-python3}; W=${W:-/tmp/w5}; mkdir -p $W; ROUNDS=${ROUNDS:-6}
S=$(date +%s)
i=0
for w in "mlp-deep forward float32" "gpt2 decode bfloat16"; do
  set -- $w
  ( export CUDA_VISIBLE_DEVICES=$i COMPILEBENCH_COMPILE_CACHE_DIR=$W/cache$i
    timeout 400 $PY -m harness ab -w $1 --scenario $2 --size full -c inductor --device cuda --dtype $3 --rounds $ROUNDS \
      --base-python $PY --head-python $PY --out $W/ab --label aa-$1 --json-file $W/ab-aa-$1.json > $W/ab-aa-$1.log 2>&1
    echo "ab A/A $1 exit $? at $(( $(date +%s) - S )) s" ) &
  i=$((i + 1))
done
wait
tail -4 $W/ab-aa-*.log
$PY - "$W" <<'PY'
import json, sys, glob
sys.path.insert(0, ".")
from harness.model.schema import load_run
for f in sorted(glob.glob(sys.argv[1] + "/ab/ab/*/*/round-*.json")):
    for r in load_run(f).records:
        p = (r.metrics or {}).get("machine_probe") or {}
        print(f.split("/ab/")[-1], r.case.case_id, r.status, "probe n", p.get("n"), "share %.4f" % (p.get("share_of_case") or 0),
              "lat %.6f" % ((r.metrics or {}).get("latency_s") or 0), "compile %.1f" % ((r.metrics or {}).get("compile_time_s") or 0))
for f in sorted(glob.glob(sys.argv[1] + "/ab-aa-*.json")):
    d = json.load(open(f))
    for c in d.get("cases", []):
        print(f.split("/")[-1], c.get("case_id"), c.get("verdict"), "probe", c.get("probe_change"), "eager", c.get("eager_change"),
              [(m["metric"], m["verdict"], m.get("change")) for m in c.get("metrics", [])])
PY
[ -n "${OUT:-}" ] && tar czf $OUT/call5.tgz -C $W .
exit 0
