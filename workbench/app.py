"""`kopt-tui`: the keyboard-driven workbench.

Screens: home (cases) → run (phases, iterations, diff/verification/profile/metrics/log/
manifest) and branch review (`g`). `?` shows the current screen's keys, ctrl+p holds every
action, `.kopt/config.yaml` remaps keys (workbench/config.py). All slow work runs in thread
workers through a `Backend` (workbench/backend.py), so the UI never waits.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from kopt.harness.errors import KoptError
from kopt.workbench.backend import Backend, RunRequest
from kopt.workbench.config import TuiConfig, load_config
from kopt.workbench.screens.branches import BranchesScreen
from kopt.workbench.screens.home import HomeScreen
from kopt.workbench.screens.run import RunScreen
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

SCREENS_WITH_KEYS: tuple[type[Screen], ...] = (HomeScreen, RunScreen, BranchesScreen)


class KoptApp(App[None]):
    """The workbench: a face over `Backend`'s calls."""

    CSS_PATH = "kopt.tcss"
    TITLE = "kopt"

    BINDINGS = [
        Binding("question_mark", "help", "Help", id="help"),
        Binding("g", "branches", "Branches", id="branches"),
        # Everywhere, but not in the footer: home shows `q`, other screens `q` back.
        Binding("Q", "quit", "Quit", show=False, id="quit"),
    ]

    def __init__(self, *, backend: Backend | None = None, config: TuiConfig | None = None,
                 case: str | None = None) -> None:
        super().__init__()
        self.backend = backend or Backend()
        self.config = config or TuiConfig()
        self.start_case = case

    @staticmethod
    def binding_ids() -> set[str]:
        """Every binding id a user may remap under `keys:`."""
        ids = {b.id for b in KoptApp.BINDINGS if isinstance(b, Binding) and b.id}
        for screen in SCREENS_WITH_KEYS:
            ids |= {b.id for b in screen.BINDINGS if isinstance(b, Binding) and b.id}
        return ids

    def on_mount(self) -> None:
        if self.config.keys:
            self.set_keymap(dict(self.config.keys))
        self.push_screen(HomeScreen())
        if self.start_case:
            self.open_run(self.start_case)

    # ---- navigation used by screens -----------------------------------------------------

    def open_run(self, case: str, run_id: str | None = None) -> None:
        self.push_screen(RunScreen(case=case, run_id=run_id))

    def new_run(self, case: str) -> None:
        from kopt.workbench.screens.new_run import NewRunScreen

        def start(request: RunRequest | None) -> None:
            if request is None:
                return
            if isinstance(self.screen, RunScreen) and self.screen.case == case:
                self.screen.start_pipeline(request)
            else:
                self.push_screen(RunScreen(case=case, request=request))

        self.push_screen(NewRunScreen(case=case), start)

    # ---- help and palette ---------------------------------------------------------------

    def key_rows(self, screen: Screen) -> list[tuple[str, str, str]]:
        """(key, description, binding id) of the screen's own and the app's bindings."""
        rows: list[tuple[str, str, str]] = []
        seen: set[tuple[str, str]] = set()
        for active in screen.active_bindings.values():
            binding = active.binding
            if not binding.description or binding.id is None:
                continue
            if (binding.id, binding.action) in seen:
                continue
            seen.add((binding.id, binding.action))
            keys = [k for k, a in screen.active_bindings.items()
                    if a.binding.id == binding.id and a.binding.action == binding.action]
            rows.append((", ".join(self.get_key_display(Binding(k, "")) for k in keys),
                         binding.description, binding.id))
        return rows

    async def action_quit(self) -> None:
        """Quit; while a run or another job is in progress, ask first (its work is lost)."""
        from kopt.workbench.screens.confirm import ConfirmScreen

        busy = [s for s in self.screen_stack if isinstance(s, RunScreen) and s.jobs]
        if not busy:
            self.exit()
            return
        if isinstance(self.screen, ConfirmScreen):
            return
        jobs = ", ".join(sorted({job for s in busy for job in s.jobs}))

        def answer(yes: bool | None) -> None:
            if yes:
                for screen in busy:
                    screen.cancel_jobs()
                self.exit()

        self.push_screen(ConfirmScreen(
            question=f"Quit kopt? Running now: {jobs}.",
            detail="Quitting cancels them; a cancelled run can be resumed with "
                   "`kopt run --resume RUN_ID`."), answer)

    def action_help(self) -> None:
        from kopt.workbench.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            return
        name = type(self.screen).__name__.removesuffix("Screen").lower() or "kopt"
        self.push_screen(HelpScreen(title=name, rows=self.key_rows(self.screen)))

    def action_branches(self) -> None:
        if not isinstance(self.screen, BranchesScreen):
            self.push_screen(BranchesScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every action of the current screen, with its key, then Textual's own."""
        seen: set[str] = set()
        for key, active in screen.active_bindings.items():
            binding = active.binding
            if not binding.description or binding.action in seen or binding.id is None:
                continue
            seen.add(binding.action)
            node = active.node
            yield SystemCommand(binding.description, f"{binding.id} · key {key}",
                                partial(node.run_action, binding.action))
        yield from super().get_system_commands(screen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kopt-tui",
        description="The kopt workbench: run the phases, review kernels as diffs, approve.")
    parser.add_argument("case", nargs="?", help="open this case (bundled name or directory)")
    parser.add_argument("--config", type=Path, default=None,
                        help="config file (default .kopt/config.yaml)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, binding_ids=KoptApp.binding_ids())
    except KoptError as err:
        print(f"kopt-tui: error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    # two workers kept waiting (harness.targets.standby): a saved edit's verification and its
    # timing each find one ready
    os.environ.setdefault("KOPT_WORKER_STANDBY", "2")
    KoptApp(config=config, case=args.case).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
