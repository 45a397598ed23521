#!/usr/bin/env bash
# Session 5, last call: stop the background chain, then mlp-deep forward (eager + inductor) with
# the preloaded worker vs --no-preload vs the old tree, 2 processes each interleaved (is the
# forked worker slower on this host?), then go on with the hf train steps not yet done until
# LEFT_S of the call is used.
D=/tmp/cb-s5; G=/tmp/diag
[ -d $D ] && echo "chain dir exists" || echo "chain dir gone"
pkill -TERM -f "[s]ession5_chain"; pkill -TERM -f "[o]rdered_chunks"; pkill -TERM -f "[h]arness run --suite hf"; sleep 10
echo chunks:; cat $D/hf-train/chunks.jsonl; ls $D/hf-train/*/runs/
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
[ -d /tmp/site/diffusers ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/diffusers-*.whl .whl/ruptures-*.whl .whl/importlib_metadata-*.whl .whl/zipp-*.whl .whl/lazy_importer-*.whl
mkdir -p $G
one() {  # one NAME TREE FLAGS ROUND
  local s; s=$(date +%s)
  (cd "$2" && PYTHONPATH=/tmp/site:$PWD timeout 120 python3 -m harness run --suite gpu --device cuda -w mlp-deep \
     --scenario forward -c eager,inductor $3 --out $G/$1 --no-ingest --label diag-$1-$4 > $G/$1-$4.log 2>&1)
  echo "$1 $4 rc=$? wall=$(( $(date +%s) - s ))"
}
for i in 1 2; do one pre . "" $i; one nopre . --no-preload $i; one old .old "" $i; done
PYTHONPATH=/tmp/site:$PWD python3 -m harness compare $G/nopre/runs $G/pre/runs --all --format plain > $G/compare-nopre-pre.txt 2>&1
head -c 2500 $G/compare-nopre-pre.txt
tar -czf $OUT/diag.tgz -C /tmp diag $( [ -d $D ] && echo cb-s5 )
DONE=$(python3 -c "import json;print(' '.join(m for l in open('$D/hf-train/chunks.jsonl') for m in json.loads(l)['models'].split(',')))" 2>/dev/null)
ALL=$(sed -n '/MODELS="\${MODELS:-/,/}"/p' benchmarks/gpu/session5_chain.sh | tr -d '\\' | sed 's/.*MODELS:-//; s/}".*//')
REST=$(for m in $ALL; do case " $DONE " in *" $m "*) ;; *) echo "$m";; esac; done | tr '\n' ' ')
echo "rest: $REST"; left=$(( ${LEFT_S:-515} - SECONDS )); echo "continuing for $left s"
[ "$left" -gt 30 ] || exit 0
DIR=$D/hf-train2 SITE=/tmp/site SUITE=hf SCENARIO=train K=2 MODELS="$REST" setsid bash benchmarks/gpu/ordered_chunks.sh > $D/hf-train2.log 2>&1 &
pid=$!; sleep "$left"; kill -TERM -- -$pid; sleep 8
cat $D/hf-train2/chunks.jsonl; tar -czf $OUT/train.tgz -C /tmp cb-s5/hf-train cb-s5/hf-train2; echo "done $SECONDS"
