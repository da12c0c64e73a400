"""The run's phase manifests as JSON, each marked valid or with its validation problem."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static


class ManifestView(VerticalScroll):
    """One block per phase manifest that exists."""

    DEFAULT_CSS = """
    ManifestView { height: 1fr; }
    """

    BINDINGS = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._body = Static(Text("no manifests yet", style="dim"))

    def compose(self):  # type: ignore[override]
        yield self._body

    def show(self, manifests: list[Any]) -> None:
        if not manifests:
            self._body.update(Text("no manifests yet", style="dim"))
            return
        parts: list[Any] = []
        for m in manifests:
            mark = Text("valid", style="bold green") if m.valid else Text("INVALID",
                                                                          style="bold red")
            parts.append(Text.assemble((f"{m.phase}.json  ", "bold"), mark,
                                       (f"  {m.problem}" if m.problem else "", "dim")))
            parts.append(Syntax(json.dumps(m.data, indent=2, sort_keys=False), "json",
                                theme="ansi_dark", word_wrap=True))
            parts.append(Text(""))
        self._body.update(Group(*parts))
