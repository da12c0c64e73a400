#!/usr/bin/env bash
# One device call on a 2-GPU machine: a benchmark command on GPU 0 (its output in
# $OUT/gpu0.log) beside `kopt suite DIRS` on GPU 1, each on half the cores, both cut at
# SECONDS; the suite's rows merged into $OUT/suite.{md,json,png}, its log in $OUT.
# Usage: bash benchmarks/beside_suite.sh SECONDS "COMMAND" "DIR..." [more kopt suite arguments]
#   e.g. bash benchmarks/beside_suite.sh 500 "python3 benchmarks/models_gpu.py" "kb/level2" --jobs 2
set -u
secs=$1; cmd=$2; dirs=$3; shift 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/suite /tmp/kp /tmp/ks
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())"
half=$(( $(nproc) / 2 ))
start=$(date +%s)
CUDA_VISIBLE_DEVICES=0 KOPT_HOME=/tmp/kp taskset -c 0-$((half - 1)) setsid timeout -s TERM -k 5 "$secs" \
  bash -c "$cmd" > "$out/gpu0.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 KOPT_HOME=/tmp/ks taskset -c $half-$(( $(nproc) - 1 )) setsid timeout -s TERM -k 5 "$secs" \
  python3 -m kopt suite $dirs --keep /tmp/s1 --out /tmp/suite/gpu1 "$@" > /tmp/suite/gpu1.log 2>&1 &
wait
python3 benchmarks/suite_merge.py "$out/suite" /tmp/suite/gpu*.rows.jsonl --seconds $(( $(date +%s) - start ))
cp /tmp/suite/gpu1.log "$out/suite-logs.txt"
tail -n 8 /tmp/suite/gpu1.log
tail -n 40 "$out/gpu0.log"
