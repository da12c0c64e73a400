"""Top kernels by device time and roofline bars (how close each iteration is to the floor)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

BAR_WIDTH = 30


def bar(fraction: float, width: int = BAR_WIDTH, style: str = "green") -> Text:
    """A text bar: `fraction` (0..1) of `width` cells filled."""
    fraction = max(0.0, min(1.0, fraction))
    full = round(fraction * width)
    return Text.assemble(("█" * full, style), ("·" * (width - full), "dim"))


def top_kernels(profile: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The kernel rows of a profile, whatever the producer called the list."""
    if not profile:
        return []
    for key in ("top_kernels", "kernels", "top"):
        rows = profile.get(key)
        if isinstance(rows, list):
            return [r for r in rows if isinstance(r, dict)]
    return []


def kernel_ms(row: dict[str, Any]) -> float:
    for key in ("device_ms", "time_ms", "total_ms", "ms", "cuda_time_ms", "self_ms"):
        if isinstance(row.get(key), int | float):
            return float(row[key])
    return 0.0


class ProfileView(VerticalScroll):
    """The baseline's hot kernels, then % of the roofline floor per iteration."""

    DEFAULT_CSS = """
    ProfileView { height: 1fr; }
    """

    BINDINGS = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._body = Static(Text("no profile yet (the architect phase writes it)", style="dim"))

    def compose(self):  # type: ignore[override]
        yield self._body

    def show(self, profile: dict[str, Any] | None, iterations: list[Any]) -> None:
        parts: list[Any] = []
        rows = top_kernels(profile)
        if rows:
            total = sum(kernel_ms(r) for r in rows) or 1.0
            table = Table(title="top kernels of the baseline (profiled time)", title_justify="left",
                          box=None, expand=True, header_style="bold")
            table.add_column("kernel", ratio=1, no_wrap=True, overflow="ellipsis")
            table.add_column("ms", justify="right")
            table.add_column("share", width=BAR_WIDTH + 6)
            for row in rows[:10]:
                ms = kernel_ms(row)
                table.add_row(str(row.get("name", "?")), f"{ms:.3f}",
                              Text.assemble(bar(ms / total, BAR_WIDTH, "cyan"),
                                            f" {100 * ms / total:3.0f}%"))
            parts.append(table)
        else:
            parts.append(Text("no kernel profile recorded", style="dim"))
        floors = [it for it in iterations if it.pct_of_floor is not None]
        parts.append(Text(""))
        parts.append(Text("roofline: % of the floor reached (100% = at the bound)", style="bold"))
        if not floors:
            parts.append(Text("no measured iteration yet", style="dim"))
        for it in floors:
            pct = float(it.pct_of_floor)
            parts.append(Text.assemble(f"iter {it.iteration:>2} ", bar(pct / 100.0),
                                       f" {pct:5.1f}%"))
        self._body.update(Group(*parts))
