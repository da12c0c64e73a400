"""`python -m kopt ...`: the same as the `kopt` command."""

from kopt.workbench.cli import main

raise SystemExit(main())
