"""Merge the rows of several `kopt suite --out` runs into one report.

    python benchmarks/suite_merge.py OUT_BASE ROWS.jsonl|SUITE.json ... [--device cuda] [--seconds S]

Each input is a run's `FILE.rows.jsonl` (rows appended as problems end, so a run cut at its
time limit still counts what it finished) or its `FILE.json`. Writes OUT_BASE.md/.json/.png
with `phases.suite.write_reports`, rows in problem order, and prints the summary table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kopt.phases.suite import (
    SuiteResult,
    environment,
    row_from_dict,
    to_markdown,
    write_reports,
)


def read_rows(path: Path) -> list[dict]:
    text = path.read_text() if path.is_file() else ""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)["rows"] if text else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=0.0)
    args = ap.parse_args()
    rows = {}
    for p in args.inputs:
        for d in read_rows(p):
            rows[d["problem"]] = row_from_dict(d)
    ordered = sorted(rows.values(), key=lambda r: (r.level, int(Path(r.file).stem.split("_")[0])
                                                   if Path(r.file).stem.split("_")[0].isdigit()
                                                   else 0, r.problem))
    result = SuiteResult(ordered, args.device, args.seconds, "", environment())
    write_reports(result, Path(args.out))
    print(to_markdown(result))


if __name__ == "__main__":
    main()
