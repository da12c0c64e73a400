#!/usr/bin/env bash
# One device call on a machine of several GPUs: `kopt suite` over DIRS, one interleaved shard
# per GPU (CUDA_VISIBLE_DEVICES), each cut at SECONDS, then every finished row merged into
# $OUT/suite.{md,json,png} and the logs into $OUT/suite-logs.txt.
# Usage: bash benchmarks/suite_multi_gpu.sh SECONDS "DIR..." [more kopt suite arguments]
set -u
secs=$1; dirs=$2; shift 2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/suite
n=$(nvidia-smi -L | wc -l)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())"
git rev-parse --short HEAD 2>/dev/null
start=$(date +%s)
# each shard on its own slice of the host's cores (kopt suite shares them out to its workers)
pin() { command -v taskset > /dev/null && python3 -c "import os, sys
c = sorted(os.sched_getaffinity(0)); i, n = int(sys.argv[1]), int(sys.argv[2]); k = len(c) // n
print('taskset -c ' + ','.join(map(str, c[(i - 1) * k:i * k])) if k else '')" "$1" "$n"; }
for i in $(seq 1 "$n"); do
  CUDA_VISIBLE_DEVICES=$((i - 1)) KOPT_HOME=/tmp/kws$i $(pin "$i") setsid timeout -s TERM -k 5 "$secs" \
    python3 -m kopt suite $dirs --shard "$i/$n" --keep /tmp/s$i --out /tmp/suite/gpu$i "$@" \
    > /tmp/suite/gpu$i.log 2>&1 &
done
wait
python3 benchmarks/suite_merge.py "$out/suite" /tmp/suite/gpu*.rows.jsonl --seconds $(( $(date +%s) - start ))
for i in $(seq 1 "$n"); do echo "=== GPU $((i - 1))"; cat /tmp/suite/gpu$i.log; done > "$out/suite-logs.txt"
tail -n 5 /tmp/suite/gpu*.log
