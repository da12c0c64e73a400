"""The offline engineer: model graph -> fusion groups -> readable Triton (no network, no key)."""

from __future__ import annotations

from kopt.phases.engineers.base import register_engineer
from kopt.phases.engineers.offline.engineer import (
    OfflineEngineer,
    OfflineResult,
    generate_candidate,
)

register_engineer("offline", lambda options: OfflineEngineer(options))

__all__ = ["OfflineEngineer", "OfflineResult", "generate_candidate"]
