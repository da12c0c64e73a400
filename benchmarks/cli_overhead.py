"""Where a `kopt verify` CLI's seconds go outside the verification itself.

    python benchmarks/cli_overhead.py CASE CANDIDATE [--device cuda] [--repeats 3]

Times fresh processes doing less and less than the command: Python alone, `import torch`,
torch plus `torch.cuda.is_available()` or NVML's device count, `kopt --help`, then `kopt verify --timing --json`
(its wall seconds against the verification's own `elapsed_s`, and the seconds between the
verification's end, as the command reports it, and the process's exit). Medians of
`--repeats` runs after one warm-up of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _wall(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    return time.monotonic() - t0, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case")
    parser.add_argument("candidate")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    home = Path(os.environ.get("KOPT_HOME") or "/tmp/kopt-cli-overhead")
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KOPT_HOME": str(home),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    case, cand = str(Path(args.case).resolve()), str(Path(args.candidate).resolve())
    py = sys.executable
    steps = {
        "python -c pass": [py, "-c", "pass"],
        "import torch": [py, "-c", "import torch"],
        "torch + cuda.is_available()": [py, "-c", "import torch; torch.cuda.is_available()"],
        "torch + NVML device count": [py, "-c", "import torch; torch.cuda._device_count_nvml()"],
        "kopt --help": [py, "-m", "kopt", "--help"],
        "kopt verify": [py, "-m", "kopt", "verify", case, cand, "--device", args.device,
                        "--timing", "--json"],
    }
    rows = []
    for name, argv in steps.items():
        _wall(argv, env, home)  # warm-up: caches, a standby's compile caches
        walls, inside = [], []
        for _ in range(args.repeats):
            wall, out = _wall(argv, env, home)
            walls.append(wall)
            if name == "kopt verify":
                try:
                    report = json.loads(out.strip().splitlines()[-1])
                    inside.append(float(report["timing"]["elapsed_s"]))
                except (IndexError, ValueError, KeyError):
                    pass
        rows.append((name, statistics.median(walls),
                     statistics.median(inside) if inside else None))
    print(f"{'step':<30} {'wall s':>7} {'verification s':>15} {'outside it s':>13}")
    for name, wall, inside in rows:
        print(f"{name:<30} {wall:7.2f} {'' if inside is None else f'{inside:15.2f}':>15} "
              f"{'' if inside is None else f'{wall - inside:13.2f}':>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
