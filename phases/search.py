"""The accelerator's coordinate search over independent kernels' launch parameters.

A candidate's kernels are tuned each on its own: one dimension (a kernel's parameter) at a
time, the others fixed at their current best. Along a dimension of ordered values the search
times both neighbours of the current value, then walks on in the direction that gained, one
step at a time, and stops the dimension as soon as a step gains under the timer's noise;
a dimension of unordered values (a matmul's `BACKEND`) is timed whole. After a pass over
every kernel and dimension, a second pass runs when the first moved anything (the kernels
share the forward's timing). Finally the joint check times the winners together against
the start in one job: they must beat it beyond noise, else the start is kept. The first
step of every dimension is timed up front in one job (`sweep`): a job costs seconds of
fixed work on a GPU, and most dimensions stop at their first step.

Three kernels with 5 block sizes and 4 warp counts each take about 3 x (2 + 2) trials,
where the joint product has 8000 points.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kopt.harness.errors import KoptError
from kopt.harness.speedup import NOISE_FLOOR

SEP = "/"
SWEEP_RESERVE = 8
"""Trials the first sweep leaves for the walks along the dimensions that gained."""
TimeConfigs = Callable[[list[dict[str, Any]], str], list[dict[str, Any]]]
"""time_configs(configs, what) -> one row per config: {"median_ms", "p20_ms", "p80_ms",
"checked", "detail"} (`what` names the step for progress lines)."""


def time_files(configs: list[dict[str, Any]], file_of: Callable[[dict[str, Any]], Any],
               time_paths: Callable[[list[Any]], list[dict[str, Any]]]
               ) -> tuple[list[dict[str, Any]], list[Any]]:
    """Rows and files for `configs`: each configuration written by `file_of` and the files
    timed together by `time_paths`; a configuration `file_of` refuses (KoptError: every region
    in PyTorch is the baseline, not a candidate) gets an unchecked row and no file."""
    files: list[Any] = []
    refused: dict[int, str] = {}
    for i, c in enumerate(configs):
        try:
            files.append(file_of(c))
        except KoptError as err:
            files.append(None)
            refused[i] = err.one_line()
    runnable = [f for f in files if f is not None]
    timed = iter(time_paths(runnable) if runnable else [])
    rows = [{"ok": False, "checked": False, "median_ms": None, "detail": refused[i]}
            if i in refused else next(timed) for i in range(len(configs))]
    return rows, files


def kernel_of(key: str) -> str:
    """`_g0_kernel/BLOCK_SIZE` -> `_g0_kernel`; a flat key (one kernel) -> ``."""
    return key.split(SEP, 1)[0] if SEP in key else ""


def dimensions(space: dict[str, list[Any]]) -> list[tuple[str, list[str]]]:
    """[(kernel, [its keys])] in the order the kernels appear in the space."""
    out: dict[str, list[str]] = {}
    for key in space:
        out.setdefault(kernel_of(key), []).append(key)
    return list(out.items())


def _ordered(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


class CoordinateSearch:
    """One search; `trials` (every timed configuration, in order) and `steps` (one per tuned
    dimension) are what the manifest records."""

    def __init__(self, space: dict[str, list[Any]], time_configs: TimeConfigs, *,
                 max_trials: int, noise_floor: float = NOISE_FLOOR,
                 log: Callable[[str], None] = lambda _m: None,
                 settled: dict[str, tuple[dict[str, Any], list[Any]]] | None = None) -> None:
        self.space = space
        self.time_configs = time_configs
        self.max_trials = max_trials
        self.noise_floor = noise_floor
        self.log = log
        self.settled = settled or {}
        """key -> (the kernel's configuration, values): evidence (the tuning memory) that at
        that configuration of its kernel, these values of `key` gained nothing; a first step
        to one of them is not timed again while the kernel is at that configuration."""
        self.timed: dict[str, dict[str, Any]] = {}
        self.trials: list[dict[str, Any]] = []
        self._beat: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None = None
        """(first start, the start that beat it, its row) when `start` timed them together."""
        self.steps: list[dict[str, Any]] = []

    # -- timing -----------------------------------------------------------------------------

    def _time(self, configs: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        """Rows for `configs`; each configuration is timed once per search (cached), within
        the trial budget (configurations over it come back unchecked)."""
        new = [c for c in configs if _key(c) not in self.timed]
        new = list({_key(c): c for c in new}.values())
        room = max(0, self.max_trials - len(self.trials))
        run, skipped = new[:room], new[room:]
        if run:
            for config, row in zip(run, self.time_configs(run, what), strict=True):
                row = {**row, "config": config, "step": what}
                self.timed[_key(config)] = row
                self.trials.append(row)
        for config in skipped:
            self.timed[_key(config)] = {"config": config, "checked": False, "median_ms": None,
                                        "detail": "not run: trial budget spent", "step": what}
        return [self.timed[_key(c)] for c in configs]

    def retime(self, configs: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        """Time `configs` again side by side in one job (the joint check), uncached."""
        rows = []
        for config, row in zip(configs, self.time_configs(configs, what), strict=True):
            row = {**row, "config": config, "step": what}
            self.trials.append(row)
            rows.append(row)
        return rows

    def _noise(self, *rows: dict[str, Any]) -> float:
        worst = self.noise_floor
        for r in rows:
            m, p20, p80 = r.get("median_ms"), r.get("p20_ms"), r.get("p80_ms")
            if m and p20 is not None and p80 is not None:
                worst = max(worst, (float(p80) - float(p20)) / 2 / float(m))
        return worst

    def gains(self, new: dict[str, Any], current: dict[str, Any]) -> bool:
        """Does `new` beat `current` by more than the timer's noise? (An unchecked current
        loses to any checked configuration.)"""
        if not new.get("checked") or not new.get("median_ms"):
            return False
        if not current.get("checked") or not current.get("median_ms"):
            return True
        return float(new["median_ms"]) < float(current["median_ms"]) * (
            1 - self._noise(new, current))

    # -- the search ---------------------------------------------------------------------------

    def start(self, candidates: list[tuple[str, dict[str, Any]]],
              known: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Time the starting points (the kernel's default, remembered winners) side by side;
        the fastest checked one is the start (a remembered one only if it beats the default
        beyond noise). `known`: the caller's own timing of the only candidate, which stands
        (no job) when nothing else is left to try from it (every first step settled)."""
        configs = [c for _n, c in candidates]
        if known is not None and len(configs) == 1 and not any(
                self.first_steps(configs[0], key) for _k, keys in dimensions(self.space)
                for key in keys):
            row = {**known, "config": configs[0], "step": "start"}
            self.timed[_key(configs[0])] = row
            self.trials.append(row)
            self.log("nothing left to try from the start: its known timing stands (no job)")
            return dict(configs[0]), row
        rows = self._time(configs, "start: " + ", ".join(n for n, _c in candidates))
        best = 0
        for i in range(1, len(rows)):
            if self.gains(rows[i], rows[best]):
                best = i
        if best:  # a remembered start beat the first one side by side, in this very job
            self._beat = (dict(configs[0]), dict(configs[best]), rows[best])
        return dict(configs[best]), rows[best]

    def tune_dimension(self, current: dict[str, Any], row: dict[str, Any], key: str
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
        values = self.space[key]
        kernel, param = (key.split(SEP, 1) if SEP in key else ("", key))
        what = f"{kernel + ' ' if kernel else ''}{param}"
        step: dict[str, Any] = {"kernel": kernel or None, "param": param,
                                "from": current.get(key), "tried": []}
        configs = self.first_steps(current, key)
        if not configs:
            known = self.settled_here(current, key)
            if known:
                step.update({"tried": [], "settled": known, "to": current.get(key),
                             "median_ms": row.get("median_ms"),
                             "stopped": f"the tuning memory: {', '.join(map(str, known))} "
                                        "gained nothing here (not timed again)"})
                self.steps.append(step)
                self.log(f"tuning {what}: the tuning memory says {', '.join(map(str, known))} "
                         f"gained nothing from {current.get(key)}; not timed again")
            return current, row
        if not _ordered(values) or current.get(key) not in values:
            others = configs
            self.log(f"tuning {what}: {len(others)} value(s), the others at their best")
            rows = self._time(others, f"tune {what}")
            step["tried"] = [c[key] for c in others]
            for c, r in zip(others, rows, strict=True):
                if self.gains(r, row):
                    current, row = c, r
            step.update({"to": current.get(key), "stopped": "every value timed"})
            self.steps.append(step)
            return current, row
        order = sorted(values)
        i = order.index(current[key])
        neighbours = [order.index(c[key]) for c in configs]
        self.log(f"tuning {what}: from {current[key]}, trying "
                 + " and ".join(str(c[key]) for c in configs)
                 + " (the other parameters at their best)")
        rows = self._time(configs, f"tune {what}")
        step["tried"] += [c[key] for c in configs]
        direction = 0
        for j, c, r in zip(neighbours, configs, rows, strict=True):
            if self.gains(r, row):
                current, row, direction, i = c, r, j - i, j
        stopped = "no neighbour gains over the timer's noise"
        while direction:
            j = i + direction
            if not 0 <= j < len(order):
                stopped = "end of the declared values"
                break
            if len(self.trials) >= self.max_trials:
                stopped = "trial budget spent"
                break
            c = {**current, key: order[j]}
            self.log(f"tuning {what}: {order[j]}")
            r = self._time([c], f"tune {what}")[0]
            step["tried"].append(order[j])
            if not self.gains(r, row):
                stopped = f"{order[j]} gains under the timer's noise"
                break
            current, row, i = c, r, j
        step.update({"to": current.get(key), "stopped": stopped,
                     "median_ms": row.get("median_ms")})
        self.steps.append(step)
        return current, row

    def first_steps(self, current: dict[str, Any], key: str) -> list[dict[str, Any]]:
        """The configurations a dimension's first step times: both neighbours of an ordered
        value, every other value of an unordered one."""
        values = self.space[key]
        if len(values) < 2:
            return []
        if not _ordered(values) or current.get(key) not in values:
            steps = [{**current, key: v} for v in values if v != current.get(key)]
        else:
            order = sorted(values)
            i = order.index(current[key])
            steps = [{**current, key: order[j]} for j in (i + 1, i - 1) if 0 <= j < len(order)]
        at, lost = self.settled.get(key, ({}, []))
        if at and all(current.get(k) == v for k, v in at.items()):
            steps = [c for c in steps if c[key] not in lost]
        return steps

    def settled_here(self, current: dict[str, Any], key: str) -> list[Any]:
        """The values of `key` the evidence settles at `current` (not timed again)."""
        at, lost = self.settled.get(key, ({}, []))
        return list(lost) if at and all(current.get(k) == v for k, v in at.items()) else []

    def sweep(self, current: dict[str, Any], reserve: int = SWEEP_RESERVE
              ) -> dict[str, list[dict[str, Any]]]:
        """The first step of every dimension from `current` timed in one job: {key: its
        rows}. A dimension none of whose first steps gains over `current` is then done
        without a job of its own (a job is a worker start, a reference forward and the
        compiles: seconds each on a GPU, where one job per dimension made the accelerator of
        a seven-kernel block run past two minutes). Only what fits the trial budget less
        `reserve` (the walks that follow) is swept; a dimension left out is tuned as before."""
        picked: dict[str, list[dict[str, Any]]] = {}
        room = max(0, self.max_trials - len(self.trials) - reserve)
        count = 0
        for _kernel, keys in dimensions(self.space):
            for key in keys:
                configs = self.first_steps(current, key)
                if configs and count + len(configs) <= room:
                    picked[key] = configs
                    count += len(configs)
        flat = [c for cs in picked.values() for c in cs]
        if not flat:
            return {}
        self.log(f"sweep: the first step of {len(picked)} dimension(s), {len(flat)} trial(s) "
                 "in one job")
        rows = iter(self._time(flat, "sweep"))
        return {key: [next(rows) for _ in cs] for key, cs in picked.items()}

    def _unmoved(self, current: dict[str, Any], row: dict[str, Any], key: str,
                 rows: list[dict[str, Any]]) -> None:
        kernel, param = (key.split(SEP, 1) if SEP in key else ("", key))
        self.steps.append({"kernel": kernel or None, "param": param, "from": current.get(key),
                           "tried": [r["config"][key] for r in rows], "to": current.get(key),
                           "stopped": "no first step gains over the timer's noise (sweep)",
                           "median_ms": row.get("median_ms")})

    def run(self, current: dict[str, Any], row: dict[str, Any], *, max_passes: int = 2
            ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Coordinate passes from `current` (timed as `row`), each after a `sweep` of every
        dimension's first step; the best configuration found."""
        for n in range(1, max_passes + 1):
            before, base = dict(current), row
            first = self.sweep(current)
            for _kernel, keys in dimensions(self.space):
                for key in keys:
                    if len(self.trials) >= self.max_trials:
                        self.log("trial budget spent: the search stops here")
                        return current, row
                    swept = first.get(key)
                    if swept is not None and not any(self.gains(r, base) for r in swept):
                        self._unmoved(current, row, key, swept)
                        continue
                    current, row = self.tune_dimension(current, row, key)
            if current == before:
                break
            if n < max_passes:
                self.log(f"pass {n} moved {sum(current[k] != before[k] for k in current)} "
                         "parameter(s): one more pass")
        return current, row

    def joint_check(self, start: dict[str, Any], best: dict[str, Any]
                    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Time the winners together against the start, side by side; the one to keep and
        its row (None when nothing changed)."""
        if best == start:
            return start, None
        if self._beat is not None and self._beat[:2] == (start, best):
            self.log("joint check: the remembered start beat it side by side and nothing moved "
                     "since: kept")
            return best, self._beat[2]
        self.log("joint check: every kernel's winner together against the start")
        start_row, best_row = self.retime([start, best], "joint check")
        if self.gains(best_row, start_row):
            return best, best_row
        self.log("joint check: the winners together gain under the timer's noise; keeping the "
                 "start")
        return start, start_row
