"""Latency and % of the roofline floor per iteration, as text bars; plus re-bench rows."""

from __future__ import annotations

from typing import Any

from kopt.workbench.backend import format_speedup
from kopt.workbench.widgets.profile_view import bar
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

BAR_WIDTH = 14


class MetricsChart(VerticalScroll):
    """One row per iteration: speedup, latency, % of floor, each with a bar."""

    DEFAULT_CSS = """
    MetricsChart { height: 1fr; }
    """

    BINDINGS = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._body = Static(Text("no iterations yet", style="dim"))
        self.bench_rows: list[dict[str, Any]] = []

    def compose(self):  # type: ignore[override]
        yield self._body

    def show(self, iterations: list[Any], *, baseline_ms: float | None = None,
             bench_rows: list[dict[str, Any]] | None = None) -> None:
        if bench_rows is not None:
            self.bench_rows = bench_rows
        parts: list[Any] = []
        measured = [it for it in iterations if it.speedup is not None]
        if measured:
            best = max(float(it.speedup) for it in measured) or 1.0
            table = Table(box=None, expand=False, header_style="bold",
                          title="per iteration" + (f" (baseline {baseline_ms:.3f} ms)"
                                                   if baseline_ms else ""),
                          title_justify="left")
            table.add_column("iter", justify="right", no_wrap=True)
            table.add_column("latency", justify="right", no_wrap=True, min_width=9)
            table.add_column("speedup", justify="right", no_wrap=True, min_width=7)
            table.add_column("", width=BAR_WIDTH, no_wrap=True)
            table.add_column("% floor", justify="right", no_wrap=True)
            table.add_column("", width=BAR_WIDTH, no_wrap=True)
            for it in measured:
                latency = f"{baseline_ms / it.speedup:.3f} ms" if baseline_ms and it.speedup \
                    else "—"
                pct = it.pct_of_floor
                table.add_row(str(it.iteration), latency, format_speedup(it.speedup),
                              bar(float(it.speedup) / best, BAR_WIDTH, "green"),
                              f"{pct:.0f}%" if pct is not None else "—",
                              bar((pct or 0) / 100.0, BAR_WIDTH, "cyan"))
            parts.append(table)
        else:
            parts.append(Text("no measured iteration yet", style="dim"))
        if self.bench_rows:
            parts.append(Text(""))
            bench = Table(title="re-bench (b)", title_justify="left", box=None,
                          header_style="bold")
            for col in ("variant", "median ms", "p20", "p80", "% floor", "vs eager",
                        "vs compile", "timing"):
                bench.add_column(col, justify="left" if col in ("variant", "timing") else "right",
                                 no_wrap=True, min_width=8 if col == "variant" else None)
            for row in self.bench_rows:
                bench.add_row(str(row.get("variant", "")), _ms(row.get("median_ms")),
                              _ms(row.get("p20_ms")), _ms(row.get("p80_ms")),
                              _num(row.get("pct_of_floor"), "{:.0f}%"),
                              _speedup(row.get("speedup_vs_eager")),
                              _speedup(row.get("speedup_vs_compile")),
                              _timing(row))
            parts.append(bench)
        self._body.update(Group(*parts))


def _speedup(value: Any) -> str:
    """Through the backend's one speedup formatter, like every other speedup on screen."""
    return format_speedup(float(value)) if isinstance(value, int | float) else "—"


def _timing(row: dict[str, Any]) -> str:
    """The row's timing label, and for a baseline kept from an earlier bench how old it is."""
    ago = row.get("timed_s_ago")
    label = str(row.get("timing_label", ""))
    return f"{label}, {ago:.0f} s ago" if isinstance(ago, int | float) else label


def _ms(value: Any) -> str:
    return _num(value, "{:.3f}")


def _num(value: Any, fmt: str) -> str:
    return fmt.format(value) if isinstance(value, int | float) else "—"
