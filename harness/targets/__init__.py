"""Execution targets: where a worker job runs (`local`, `ssh://...`, `ray://...`)."""

from kopt.harness.targets.base import Target, WorkerOutcome, resolve_target

__all__ = ["Target", "WorkerOutcome", "resolve_target"]
