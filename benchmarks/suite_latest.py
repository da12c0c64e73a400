"""The latest GPU row of every KernelBench problem over all recorded suite runs, by level.

    python benchmarks/suite_latest.py [--level level2] [--results benchmarks/results]

Reads every `*suite*.json` under the results folder except CPU runs, orders the files by
date, session and call (`2026-11-27-s10-call3-suite.json`; `2026-11-26-call4-...` counts as
session 0), and keeps each problem's last row. A row that failed because of the run itself
(a reused `--keep` folder: "already holds a case"; a stopped suite's worker refused at exit,
before efb6a42) does not replace an earlier one. Prints,
per level: problems with a row, verified, timed, the candidates' geomean speedup vs eager
and vs torch.compile, and how many candidates are slower than eager by over 2%; then the
results' (a keep-pytorch problem counted at 1.00x, what its user runs) geomean and count
slower than eager; with
`--level`, that level's rows first. Rows of different sessions may come from different
cards (H100, H200): each speedup is a ratio on its own card. A row from a run over a folder
not named after its level (`shared/s25a`, a copy of some level-2 files) counts under the
KernelBench level whose folder holds a file of its name (`--kernelbench`, default
`../shared/kernelbench` beside the checkout). Rows of problems that are not KernelBench files
(the held-out-style probes, our own files) count under `probes`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

RUN_FAULTS = ("already holds a case",
              # a suite stopped by a call's limit, before efb6a42: its running problems' rows
              "cannot schedule new futures after shutdown")


def _order(path: Path) -> tuple[str, int, int]:
    m = re.search(r"(\d{4}-\d\d-\d\d)-s(\d+)-call(\d+)", path.name)
    if m:
        return m.group(1), int(m.group(2)), int(m.group(3))
    m = re.search(r"(\d{4}-\d\d-\d\d)-call(\d+)", path.name)
    return (m.group(1), 0, int(m.group(2))) if m else ("0", 0, 0)


def level_index(kernelbench: Path) -> dict[str, str]:
    """Problem file stem -> its KernelBench level folder (`2_Conv...` -> `level2`)."""
    return {f.stem: d.name for d in sorted(kernelbench.glob("level*")) if d.is_dir()
            for f in d.glob("*.py")}


def canonical(level: str, problem: str, index: dict[str, str]) -> tuple[str, str]:
    """The (level, problem) a row counts under: its own where its folder was a level's and
    KernelBench's folder of that level holds a file of its name (our own files written after
    the held-out half's pattern, run from a folder named `level3`, count under `probes`),
    else the level whose folder holds a file of the problem's name."""
    if not problem.startswith(level + "_"):
        return level, problem
    rest = problem[len(level) + 1:]
    stem = rest.split(" (")[0]
    if re.fullmatch(r"level\d+", level):
        return (level, problem) if not index or index.get(stem) == level else ("probes", problem)
    found = index.get(stem)
    return (found, f"{found}_{rest}") if found else (level, problem)


def latest_rows(results: Path, index: dict[str, str] | None = None,
                ) -> dict[tuple[str, str], tuple[str, dict]]:
    rows: dict[tuple[str, str], tuple[str, dict]] = {}
    for path in sorted(results.glob("*suite*.json"), key=_order):
        if "cpu" in path.name:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for row in (data.get("rows") if isinstance(data, dict) else data) or []:
            if any(f in (row.get("detail") or "") for f in RUN_FAULTS):
                continue
            key = canonical(row["level"], row["problem"], index or {})
            if row.get("status") == "unfinished" and key in rows:
                continue  # a call's time limit stopped it: an earlier finished row stands
            rows[key] = (path.name, row)
    return rows


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _number(problem: str) -> int:
    m = re.match(r"level\d+_(\d+)_", problem)
    return int(m.group(1)) if m else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--level", help="also list this level's rows (level1, level2, level3)")
    ap.add_argument("--kernelbench", default=str(Path(__file__).resolve().parent.parent.parent
                                                 / "shared" / "kernelbench"),
                    help="KernelBench's level folders, to place rows of other folders")
    args = ap.parse_args()
    rows = latest_rows(Path(args.results), level_index(Path(args.kernelbench)))
    for level in sorted({lvl for lvl, _ in rows}):
        mine = sorted(((k, v) for k, v in rows.items() if k[0] == level),
                      key=lambda kv: _number(kv[0][1]))
        if level == args.level:
            for (_, problem), (file, r) in mine:
                se, sc = r.get("speedup_vs_eager"), r.get("speedup_vs_compile")
                print(f"{problem:<60} {r['status'][:12]:<12} {se or 0:6.2f} {sc or 0:6.2f} "
                      f"{r.get('outcome') or '-':<13} {file}")
        timed = [r for _, (_f, r) in mine if r.get("speedup_vs_eager")]
        eager = _geomean([r["speedup_vs_eager"] for r in timed])
        comp = _geomean([r["speedup_vs_compile"] for r in timed if r.get("speedup_vs_compile")])
        # what a user takes away: PyTorch (1.00x) where the never-regress outcome kept it
        results = [1.0 if r.get("outcome") == "keep-pytorch" else r["speedup_vs_eager"]
                   for r in timed]
        print(f"{level}: {len(mine)} problems, {sum(bool(r.get('verified')) for _, (_f, r) in mine)} "
              f"verified, {len(timed)} timed, geomean {eager or 0:.3f}x eager, {comp or 0:.3f}x "
              f"torch.compile, {sum(r['speedup_vs_eager'] < 0.98 for r in timed)} slower than eager; "
              f"results {_geomean(results) or 0:.3f}x eager, {sum(x < 0.98 for x in results)} "
              f"slower than eager, {sum(r.get('outcome') == 'keep-pytorch' for r in timed)} "
              "keep-pytorch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
