#!/usr/bin/env bash
# One device call: install the carried wheels, then run benchmark scripts with a time
# budget each, logs to $OUT. Usage: bash benchmarks/gpu_batch.sh "SECONDS:script args" ...
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KOPT_HOME=${KOPT_HOME:-/tmp/kws}
unset TRITON_INTERPRET
mkdir -p "$KOPT_HOME" "${OUT:-/tmp/out}"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))"
git rev-parse --short HEAD 2>/dev/null
i=0
for item in "$@"; do
  secs=${item%%:*}; cmd=${item#*:}; i=$((i + 1))
  # numbered: two runs of one script with other arguments keep a log each
  name=$i-$(echo "$cmd" | sed 's/^-m //' | awk '{print $1 "_" $2}' | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-50)
  echo "=== $cmd (budget ${secs}s)"
  # Own session, and the whole group killed at the budget: a script cut by its budget must
  # not leave worker subprocesses timing on the GPU under the next script (2026-11-23: a
  # cut harness_gpu.py's worker halved the next pipeline's integrator figure).
  setsid timeout -s TERM -k 5 "$secs" python3 $cmd > "${OUT:-/tmp/out}/$name.log" 2>&1 &
  pid=$!; wait $pid; rc=$?
  pkill -KILL -s "$pid" 2>/dev/null; sleep 1
  echo "--- rc=$rc; last lines:"; tail -n 40 "${OUT:-/tmp/out}/$name.log"
done
