"""The home screen: every bundled and user case with its best speedup and latest verdict."""

from __future__ import annotations

from pathlib import Path

from kopt.workbench.backend import CaseRow, format_speedup
from kopt.workbench.widgets.key_footer import KeyFooter
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Static

VERDICT_STYLE = {"approved": "bold green", "rejected": "bold red", "pending": "yellow",
                 "no runs": "dim", "invalid": "bold red"}


class HomeScreen(Screen[None]):
    """Cases on the left of everything: `/` filters, enter opens, `n` runs, `i` imports."""

    DEFAULT_CSS = """
    HomeScreen #filter { display: none; dock: top; }
    HomeScreen #filter.visible { display: block; }
    HomeScreen #cases { height: 1fr; }
    HomeScreen #status { height: 1; padding: 0 1; color: $text-muted; }
    """

    BINDINGS = [
        Binding("slash", "filter", "Filter", id="filter"),
        Binding("enter", "open_case", "Open", id="open"),
        Binding("n", "new_run", "New run", id="new_run"),
        Binding("i", "import_case", "Import", id="import"),
        Binding("q", "app.quit", "Quit", id="home_quit"),
        Binding("ctrl+r", "reload", "Reload", id="reload"),
        Binding("j", "cursor_down", "Down", show=False, id="down"),
        Binding("k", "cursor_up", "Up", show=False, id="up"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="clear_filter"),
    ]

    filter_text: reactive[str] = reactive("")
    """Substring that case names or descriptions must contain."""

    class Loaded(Message):
        """The case rows arrived from the backend."""

        def __init__(self, rows: list[CaseRow]) -> None:
            super().__init__()
            self.rows = rows

    class NeedsInit(Message):
        """The workspace is not a git repository (runs are recorded in git)."""

        def __init__(self, problem: str) -> None:
            super().__init__()
            self.problem = problem

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[CaseRow] = []
        self.shown: list[CaseRow] = []
        """The rows the table holds now, in order (the filter's match when it was filled)."""
        self._asked_init = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter cases (esc clears)", id="filter")
        yield DataTable(id="cases", cursor_type="row", zebra_stripes=True)
        yield Static("loading cases…", id="status")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "kopt"
        self.sub_title = "cases"
        table = self.query_one("#cases", DataTable)
        table.add_columns("case", "source", "runs", "best", "verdict", "description")
        table.focus()
        self.load()
        self.check_workspace()

    @work(thread=True, exclusive=True, group="home-init")
    def check_workspace(self) -> None:
        problem = self.app.backend.workspace_problem()
        if problem:
            self.post_message(self.NeedsInit(problem))

    def on_home_screen_needs_init(self, message: NeedsInit) -> None:
        from kopt.workbench.screens.confirm import ConfirmScreen

        if self._asked_init:
            return
        self._asked_init = True

        def answer(yes: bool | None) -> None:
            if yes:
                self.init_workspace()
            else:
                self.notify("runs need a git repository: `kopt init` creates one",
                            severity="warning")

        self.app.push_screen(ConfirmScreen(
            question="kopt records every kernel iteration in git. Make this folder a git "
                     "repository now (kopt init)?", detail=message.problem), answer)

    @work(thread=True, exclusive=True, group="home-init")
    def init_workspace(self) -> None:
        from kopt.harness.errors import KoptError

        try:
            done = self.app.backend.init_workspace()
        except KoptError as err:
            self.app.call_from_thread(self.app.notify, err.one_line(), severity="error")
            return
        self.app.call_from_thread(self.app.notify, done, title="kopt init")

    def on_screen_resume(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="home-load")
    def load(self) -> None:
        self.post_message(self.Loaded(self.app.backend.cases()))

    def on_home_screen_loaded(self, message: Loaded) -> None:
        self.rows = message.rows
        self._fill()

    def watch_filter_text(self) -> None:
        self._fill()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        self.query_one("#cases", DataTable).focus()

    @on(DataTable.RowSelected, "#cases")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_case()

    @property
    def visible_rows(self) -> list[CaseRow]:
        needle = self.filter_text.lower()
        return [r for r in self.rows
                if needle in r.name.lower() or needle in r.description.lower()]

    @property
    def selected_case(self) -> CaseRow | None:
        """The case under the cursor, read from the rows the table holds (not from the
        filter, which may already have changed), or None (no match, nothing loaded)."""
        table = self.query_one("#cases", DataTable)
        if not 0 <= table.cursor_row < len(self.shown):
            return None
        return self.shown[table.cursor_row]

    def _fill(self) -> None:
        if not self.is_mounted:
            return
        table = self.query_one("#cases", DataTable)
        before = self.selected_case
        table.clear()
        rows = self.visible_rows
        self.shown = rows
        for row in rows:
            best = format_speedup(row.best_speedup)
            table.add_row(row.name, row.source, str(row.runs), best,
                          Text(row.verdict, style=VERDICT_STYLE.get(row.verdict, "")),
                          row.description, key=row.name)
        if not rows and self.rows:
            table.add_row(Text(f"no case matches {self.filter_text!r}", style="dim italic"),
                          "", "", "", "", "")
        # The cursor stays on its case while the filter keeps it, else goes to the first match.
        names = [row.name for row in rows]
        table.move_cursor(row=names.index(before.name) if before and before.name in names
                          else 0)
        shown = f"{len(rows)} of {len(self.rows)} cases" if self.filter_text else \
            f"{len(self.rows)} cases"
        self.query_one("#status", Static).update(
            f"{shown} · enter open · n new run · / filter · ? help")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        self.query_one("#cases", DataTable).focus()

    def action_cursor_down(self) -> None:
        self.query_one("#cases", DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one("#cases", DataTable).action_cursor_up()

    def action_reload(self) -> None:
        self.load()

    def action_open_case(self) -> None:
        row = self.selected_case
        if row is None:
            return
        if row.verdict == "invalid":
            self.notify(row.description, title=f"{row.name} does not load", severity="error")
            return
        if row.runs == 0 or row.latest_empty:
            # Nothing to review (no run, or the latest was cancelled before its first
            # iteration): offer a new run rather than open an empty one.
            self.app.new_run(row.name)
            return
        self.app.open_run(row.name)

    def action_new_run(self) -> None:
        row = self.selected_case
        if row is None or row.verdict == "invalid":
            self.notify("pick a case that loads first", severity="warning")
            return
        self.app.new_run(row.name)

    def action_import_case(self) -> None:
        from kopt.workbench.screens.import_case import ImportScreen

        def done(answer: tuple[Path, str | None] | None) -> None:
            if answer is not None:
                self.import_file(*answer)

        self.app.push_screen(ImportScreen(), done)

    @work(thread=True, exclusive=True, group="home-import")
    def import_file(self, path: Path, name: str | None) -> None:
        from kopt.harness.errors import KoptError

        try:
            case = self.app.backend.import_kernelbench(path, name)
        except KoptError as err:
            self.app.call_from_thread(self.app.notify, err.one_line(), title="import failed",
                                      severity="error")
            return
        self.app.call_from_thread(self.app.notify, f"imported {case}", title="KernelBench")
        self.post_message(self.Loaded(self.app.backend.cases()))
