"""The pipeline in its own process, so that its work never holds the TUI's event loop.

In the TUI's process the pipeline's pure-Python work (graph capture, code generation, git,
comparing outputs) competes with the event loop for the GIL: key presses waited up to
0.5 s while a job ran (issue 24). `kopt-tui` therefore runs `run_pipeline` in a child:

    python -m kopt.workbench.pipeline_process

Protocol (JSON lines):
- stdin, first line: `{"request": RunRequest fields, "options": run_pipeline keyword args}`;
  any later line `cancel`, or the end of stdin (the TUI exited), sets the run's cancel event:
  the current step finishes and the run stops cleanly, as Ctrl-C does for `kopt run`.
- stdout: `{"event": Event fields}` per event, then one `{"result": RunResult.to_dict()}` or
  `{"error": text, "kopt": bool}`. Anything else the child prints goes to stderr.

`Backend.run_pipeline` is the parent side (workbench/backend.py).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import asdict
from typing import IO, Any

from kopt.harness.errors import KoptError
from kopt.phases.events import Event

CANCEL = "cancel"


def _listen_for_cancel(stream: IO[str], cancel: threading.Event) -> None:
    for line in stream:
        if line.strip() == CANCEL:
            break
    cancel.set()  # `cancel`, or end of input: the parent is gone or asked to stop


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints of libraries land in stderr, not in the protocol
    sys.stdout = sys.stderr
    job: dict[str, Any] = json.loads(sys.stdin.readline())
    cancel = threading.Event()
    threading.Thread(target=_listen_for_cancel, args=(sys.stdin, cancel), daemon=True,
                     name="kopt-cancel").start()
    lock = threading.Lock()

    def send(obj: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(obj, default=str) + "\n")

    def sink(event: Event) -> None:
        send({"event": asdict(event)})

    from kopt.phases.pipeline import run_pipeline

    request = job["request"]
    try:
        result = run_pipeline(request["case"], engineer=request["engineer"],
                              analyst=request.get("analyst"), phases=request.get("phases"),
                              iterations=request["iterations"], run_id=request.get("run_id"),
                              events=sink, cancel=cancel, **job.get("options", {}))
    except KoptError as err:
        send({"error": err.one_line(), "kopt": True})
        return 1
    except BaseException as err:  # reported to the TUI; the traceback goes to stderr
        import traceback

        traceback.print_exc()
        send({"error": f"{type(err).__name__}: {err}", "kopt": False})
        return 1
    send({"result": result.to_dict()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
