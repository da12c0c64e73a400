"""`kopt serve`: keep a warm kopt for this workspace, so that `kopt verify` and `kopt bench`
start in it instead of a fresh Python (workbench/serve.py says what is kept and why).

It runs in the foreground and logs one line per command it serves; Ctrl-C, `kopt serve
--stop` or `--idle-minutes` without a command ends it. `--status` says whether one is serving
here. Exit 0; 2 when another server already serves the workspace.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from kopt.workbench import serve
from kopt.workbench.arguments import positive
from kopt.workbench.output import console, print_json_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="keep a warm kopt so verify and bench start at once",
                       description="Keep torch imported and workers waiting for this workspace: "
                                   "`kopt verify` and `kopt bench` run in this server while it "
                                   "runs (same user, kopt source, Python and environment), and "
                                   "in their own process otherwise. KOPT_SERVE=0 bypasses it.")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where the waiting workers get ready for (default: cuda when the NVIDIA "
                        "driver is there, else cpu)")
    p.add_argument("--idle-minutes", type=positive("minutes"), default=serve.IDLE_S / 60,
                   help=f"end after this long without a command (default {serve.IDLE_S / 60:g})")
    p.add_argument("--status", action="store_true", help="say whether a server serves here")
    p.add_argument("--stop", action="store_true", help="end this workspace's server")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from kopt.harness.paths import workspace_root

    workspace = workspace_root()
    if args.status or args.stop:
        answer = serve.ask(workspace, {"stop": True} if args.stop else {"status": True})
        if answer is None:
            console.print(f"no kopt server serves {workspace}")
        elif args.stop:
            console.print(f"kopt server (pid {answer.get('pid')}) is stopping")
        else:
            console.print(f"kopt server pid {answer['pid']} serves {answer['workspace']}: "
                          f"{answer['served']} command(s) in {answer['up_s']:g} s"
                          f"{', busy' if answer.get('busy') else ''}")
        if args.json:
            print_json_line({"serving": answer is not None, **(answer or {})})
        return 0
    device = args.device or ("cuda" if Path("/dev/nvidiactl").exists() else "cpu")
    server = serve.Server(workspace, idle_s=args.idle_minutes * 60,
                          log=lambda line: console.print(line, soft_wrap=True, markup=False))
    server.bind()
    try:
        console.print(f"kopt server pid {os.getpid()} warming up ({device}) ...")
        serve.warm_up(device)
        from kopt.workbench.cli import _command, build_parser

        build_parser()  # every command module imported, torch with them
        console.print(f"serving `kopt {'`, `kopt '.join(sorted(serve.SERVED))}` for {workspace} "
                      f"(ends after {args.idle_minutes:g} min idle, on Ctrl-C or `kopt serve --stop`)",
                      soft_wrap=True)
        server.run(_command)
    except KeyboardInterrupt:
        console.print("kopt server: interrupted, ending")
    finally:
        server.close()
    if args.json:
        print_json_line({"served": server.served})
    return 0

