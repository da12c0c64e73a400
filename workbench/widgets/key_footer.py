"""The footer: the screen's keys that fit on one line, most important first, `?` always.

Textual's `Footer` lays every shown binding out in a row and crops what does not fit; on an
80-column terminal that hid help, quit and undo. This one keeps the bindings in the order the
screen declares them (which is their priority), drops the last ones that do not fit the width,
and always keeps the help key: `?` lists everything that was dropped.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

HELP_ACTION = "help"


def item_width(key_display: str, description: str) -> int:
    """Cells a compact `FooterKey` takes: key, a space, the description, a margin."""
    return cell_len(key_display) + (1 + cell_len(description) if description else 0) + 1


def fit_keys(items: list[tuple[str, str, str]], width: int) -> list[int]:
    """Indexes of the (key display, description, action) items to show within `width` cells:
    the help item first, then the others in order while they fit; shown in their order."""
    keep: set[int] = set()
    used = 0
    order = sorted(range(len(items)), key=lambda i: items[i][2] != HELP_ACTION)
    for i in order:
        need = item_width(items[i][0], items[i][1])
        if used + need <= width:
            keep.add(i)
            used += need
    return sorted(keep)


class KeyFooter(Footer):
    """A compact footer that never crops a key: it shows fewer keys instead."""

    def __init__(self) -> None:
        super().__init__(show_command_palette=False, compact=True)

    def compose(self):  # type: ignore[override]
        if not self._bindings_ready:
            return
        seen: set[str] = set()
        bindings: list[tuple[Binding, bool, str]] = []
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in seen:
                seen.add(binding.action)
                bindings.append((binding, enabled, tooltip))
        items = [(self.app.get_key_display(b), b.description, b.action.removeprefix("app."))
                 for b, _enabled, _tooltip in bindings]
        width = self.size.width or self.app.size.width
        for i in fit_keys(items, width):
            binding, enabled, tooltip = bindings[i]
            yield FooterKey(binding.key, items[i][0], binding.description, binding.action,
                            disabled=not enabled, tooltip=tooltip).data_bind(
                                compact=Footer.compact)

    def on_resize(self) -> None:
        self.call_after_refresh(self.recompose)
