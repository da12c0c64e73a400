#!/usr/bin/env bash
# One device call on a machine of two or more GPUs: a benchmark command on GPU 0 (its output
# in $OUT/gpu0.log) beside `kopt suite DIRS` sharded over the other GPUs (one interleaved shard
# per GPU), each on its own slice of the cores, all cut at SECONDS; the suite's rows merged into
# $OUT/suite.{md,json,png}, its logs in $OUT/suite-logs.txt.
# Usage: bash benchmarks/beside_suite.sh SECONDS "COMMAND" "DIR..." [more kopt suite arguments]
#   e.g. bash benchmarks/beside_suite.sh 500 "python3 benchmarks/models_gpu.py" "kb/level2" --jobs 2
set -u
secs=$1; cmd=$2; dirs=$3; shift 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/suite /tmp/kp
n=$(nvidia-smi -L | wc -l)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())"
# GPU i (0-based) on the i-th of n equal slices of the host's cores
pin() { command -v taskset > /dev/null && python3 -c "import os, sys
c = sorted(os.sched_getaffinity(0)); i, n = int(sys.argv[1]), int(sys.argv[2]); k = len(c) // n
print('taskset -c ' + ','.join(map(str, c[i * k:(i + 1) * k])) if k else '')" "$1" "$n"; }
start=$(date +%s)
CUDA_VISIBLE_DEVICES=0 KOPT_HOME=/tmp/kp $(pin 0 "$n") setsid timeout -s TERM -k 5 "$secs" \
  bash -c "$cmd" > "$out/gpu0.log" 2>&1 &
for g in $(seq 1 $((n - 1))); do
  CUDA_VISIBLE_DEVICES=$g KOPT_HOME=/tmp/ks$g $(pin "$g" "$n") setsid timeout -s TERM -k 5 "$secs" \
    python3 -m kopt suite $dirs --shard "$g/$((n - 1))" --keep /tmp/s$g --out /tmp/suite/gpu$g "$@" \
    > /tmp/suite/gpu$g.log 2>&1 &
done
wait
python3 benchmarks/suite_merge.py "$out/suite" /tmp/suite/gpu*.rows.jsonl --seconds $(( $(date +%s) - start ))
for g in $(seq 1 $((n - 1))); do echo "=== GPU $g"; cat /tmp/suite/gpu$g.log; done > "$out/suite-logs.txt"
tail -q -n 4 /tmp/suite/gpu*.log
tail -n 40 "$out/gpu0.log"
