#!/usr/bin/env bash
# One device call on a 2-GPU machine: full `kopt run`s of bundled cases on GPU 0
# (benchmarks/pipeline_gpu.py) beside `kopt suite DIRS` on GPU 1, each on half the cores,
# both cut at SECONDS; the suite's rows merged into $OUT/suite.{md,json,png}, logs into $OUT.
# Usage: bash benchmarks/pipeline_and_suite.sh SECONDS CASES "DIR..." [more kopt suite arguments]
set -u
secs=$1; cases=$2; dirs=$3; shift 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/suite
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())"
half=$(( $(nproc) / 2 ))
start=$(date +%s)
CUDA_VISIBLE_DEVICES=0 KOPT_HOME=/tmp/kp taskset -c 0-$((half - 1)) setsid timeout -s TERM -k 5 "$secs" \
  python3 benchmarks/pipeline_gpu.py --cases "$cases" --budget-s $((secs - 10)) --case-cap-s 200 --parts \
  > "$out/pipeline.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 KOPT_HOME=/tmp/ks taskset -c $half-$(( $(nproc) - 1 )) setsid timeout -s TERM -k 5 "$secs" \
  python3 -m kopt suite $dirs --keep /tmp/s1 --out /tmp/suite/gpu1 "$@" > /tmp/suite/gpu1.log 2>&1 &
wait
python3 benchmarks/suite_merge.py "$out/suite" /tmp/suite/gpu*.rows.jsonl --seconds $(( $(date +%s) - start ))
cp /tmp/suite/gpu1.log "$out/suite-logs.txt"
tail -n 8 /tmp/suite/gpu1.log
tail -n 25 "$out/pipeline.log"
