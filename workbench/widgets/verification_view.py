"""The verifier's per-check results for one iteration."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static


class VerificationView(VerticalScroll):
    """Accepted or rejected, then one line per check with its detail."""

    DEFAULT_CSS = """
    VerificationView { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._body = Static(Text("no verification yet (v verifies the kernel)", style="dim"))
        self.report: dict[str, Any] | None = None

    def compose(self):  # type: ignore[override]
        yield self._body

    def show_pending(self, what: str) -> None:
        self._body.update(Text(what, style="yellow"))

    def show(self, report: dict[str, Any] | None, *, source: str = "") -> None:
        self.report = report
        if not report:
            self._body.update(Text("no verification recorded for this iteration", style="dim"))
            return
        accepted = bool(report.get("accepted"))
        head = Text.assemble(
            ("ACCEPTED" if accepted else "REJECTED", "bold green" if accepted else "bold red"),
            (f"  {report.get('candidate', '')}", "dim"),
            (f"  on {report['device']}" if report.get("device") else "", "dim"),
            (f"  ({source})" if source else "", "dim"))
        table = Table(box=None, expand=True, show_header=True, header_style="bold")
        table.add_column("", width=1)
        table.add_column("check", no_wrap=True)
        table.add_column("detail", ratio=1)
        for check in report.get("checks", []):
            ok = bool(check.get("passed"))
            table.add_row(Text("✓" if ok else "✗", style="green" if ok else "red"),
                          str(check.get("name", "")), str(check.get("detail", "")))
        self._body.update(Group(head, table))
