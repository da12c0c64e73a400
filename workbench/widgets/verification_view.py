"""The verifier's per-check results for one iteration."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

# Below this many cells for the detail column, details go on their own lines under the checks
# (at 80 columns a detail column beside `every_element_written` was 8 cells wide).
DETAIL_MIN_WIDTH = 30


class VerificationView(VerticalScroll):
    """Accepted or rejected, then one line per check with its detail."""

    DEFAULT_CSS = """
    VerificationView { height: 1fr; }
    """

    BINDINGS = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._body = Static(Text("no verification yet (v verifies the kernel)", style="dim"))
        self.report: dict[str, Any] | None = None
        self.source = ""

    def compose(self):  # type: ignore[override]
        yield self._body

    def show_pending(self, what: str) -> None:
        self._body.update(Text(what, style="yellow"))

    def show(self, report: dict[str, Any] | None, *, source: str = "") -> None:
        self.report = report
        self.source = source
        self._render_report()

    def on_resize(self) -> None:
        if self.report:
            self._render_report()

    def _render_report(self) -> None:
        report = self.report
        if not report:
            self._body.update(Text("no verification recorded for this iteration", style="dim"))
            return
        accepted = bool(report.get("accepted"))
        head = Text.assemble(
            ("ACCEPTED" if accepted else "REJECTED", "bold green" if accepted else "bold red"),
            (f"  {report.get('candidate', '')}", "dim"),
            (f"  on {report['device']}" if report.get("device") else "", "dim"),
            (f"  ({self.source})" if self.source else "", "dim"))
        checks = report.get("checks", [])
        names = max((len(str(c.get("name", ""))) for c in checks), default=0)
        width = self.size.width or self.app.size.width
        if width - names - 4 < DETAIL_MIN_WIDTH:
            # Too narrow for a detail column: each check's detail goes under its name.
            lines = [head]
            for check in checks:
                ok = bool(check.get("passed"))
                lines.append(Text.assemble(("✓ " if ok else "✗ ", "green" if ok else "red"),
                                           str(check.get("name", ""))))
                detail = str(check.get("detail", ""))
                if detail and detail != "ok":
                    lines.append(Text("  " + detail, style="dim"))
            self._body.update(Group(*lines))
            return
        table = Table(box=None, expand=True, show_header=True, header_style="bold")
        table.add_column("", width=1)
        table.add_column("check", no_wrap=True)
        table.add_column("detail", ratio=1)
        for check in checks:
            ok = bool(check.get("passed"))
            table.add_row(Text("✓" if ok else "✗", style="green" if ok else "red"),
                          str(check.get("name", "")), str(check.get("detail", "")))
        self._body.update(Group(head, table))
