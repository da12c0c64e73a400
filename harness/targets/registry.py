"""Named targets from `targets.yaml` (workspace root, then `.kopt/`)."""

from __future__ import annotations

from harness.errors import TargetError
from harness.targets.base import Target


def named_target(name: str) -> Target:
    raise TargetError(f"unknown target {name!r}",
                      fix="expected 'local', ssh://[user@]host[:port][/path] or ray://host:port")
