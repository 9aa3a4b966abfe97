#!/usr/bin/env bash
# Rebuild the run bundles in sample_traces/ with the tracer's example, on CPU (gloo).
#
#   sample_traces/regenerate.sh              # every bundle
#   sample_traces/regenerate.sh ddp hsdp_2x2 # only these
#
# Each bundle is one real multi-process run: rank-<r>.pt.trace.json.gz per rank
# and manifest.json. README.md in this folder says what each one shows.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}

# The small model (4 blocks, 1.07 M parameters), 5 steps: wait 1, warmup 1, 3 profiled.
COMMON=(--model-size small --steps 5 --backend gloo)

# name | options (the folder name is the bundle's name)
BUNDLES=$(cat <<'LIST'
ddp                  --parallel ddp --nproc 2
ddp_accum_nosync     --parallel ddp --nproc 2 --accumulation-steps 2 --no-sync
ddp_accum_sync       --parallel ddp --nproc 2 --accumulation-steps 2
ddp_tiny_buckets     --parallel ddp --nproc 2 --bucket-cap-mb 0.01
ddp_straggler        --parallel ddp --nproc 2 --slow-rank 1 --slow-ms 100
ddp_tokens_x2        --parallel ddp --nproc 2 --micro-batch-size 8
fsdp_per_block       --parallel fsdp --nproc 2
fsdp_no_reshard      --parallel fsdp --nproc 2 --reshard-after-forward false
fsdp_root_only       --parallel fsdp --nproc 2 --wrapping root-only
fsdp_bf16_fp32_reduce --parallel fsdp --nproc 2 --param-dtype bfloat16 --reduce-dtype float32
fsdp1_per_block      --parallel fsdp --nproc 2 --fsdp-version 1
hsdp_2x2             --parallel hsdp --nproc 4 --replicate 2
LIST
)

wanted=" $* "
while read -r name options; do
    [[ $# -eq 0 || $wanted == *" $name "* ]] || continue
    rm -rf "sample_traces/$name"
    start_ns=$(date +%s%N)
    # shellcheck disable=SC2086  # options are words on purpose
    "$PY" -m overlapscope.tracer.examples.train $options "${COMMON[@]}" --out "sample_traces/$name" \
        >"sample_traces/.$name.log" 2>&1 || { cat "sample_traces/.$name.log" >&2; exit 1; }
    rm -f "sample_traces/.$name.log"
    elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
    printf '%-24s %6d ms  %s\n' "$name" "$elapsed_ms" "$(du -sh "sample_traces/$name" | cut -f1)"
done <<<"$BUNDLES"
du -sh sample_traces
