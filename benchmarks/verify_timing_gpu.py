"""Where a model's verification spends its seconds on the GPU.

    python benchmarks/verify_timing_gpu.py KERNELBENCH_FILE.py

Imports the file (`import-kernelbench`), generates the offline candidate, then runs
`kopt verify CASE CANDIDATE --device cuda --timing --json` and prints its wall time, the
verifier's steps and each worker job's (KernelBench level-3 2, an MLP of 2.15 G float32
parameters: 246 s, 2026-12-01).
"""
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, ".")
from kopt.harness.case import load_case_dir
from kopt.harness.kernelbench import import_kernelbench
from kopt.phases.engineers.offline.engineer import generate_candidate

f = Path(sys.argv[1])
out = Path("/tmp/vb")
d = import_kernelbench(f, name=f.stem, out=out / "case", report={}, warm=True)
cand = out / "cand.py"
cand.write_text(generate_candidate(load_case_dir(d)).source)
t = time.time()
p = subprocess.run([sys.executable, "-m", "kopt", "verify", str(d), str(cand), "--device", "cuda", "--timing", "--json"],
                   capture_output=True, text=True)
print("verify wall", round(time.time() - t, 1), "rc", p.returncode)
print(p.stderr[-6000:])
last = p.stdout.strip().splitlines()[-1]
print(json.dumps(json.loads(last).get("timing"), indent=1)[:5000])
