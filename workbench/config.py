"""The TUI's settings from `.kopt/config.yaml`.

Only two sections belong to the TUI; other sections of the file (targets, engineers) belong to
other commands and are left alone:

```yaml
keys:            # binding id -> key(s), comma-separated; see `?` in the app for the ids
  approve: A
  reject: R,x
tui:
  diff_mode: split       # unified | split
  watch: false           # start with the kernel watcher on
  editor: nvim           # else $VISUAL, $EDITOR, vi
```
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kopt.harness.errors import BadInputError
from kopt.harness.paths import kopt_dir


class TuiSettings(BaseModel):
    """The `tui:` section."""

    model_config = ConfigDict(extra="forbid")

    diff_mode: Literal["unified", "split"] = "split"
    """How diffs open; narrow terminals (< 100 columns) always show unified."""
    watch: bool = False
    """Start run screens with the kernel watcher on."""
    editor: str | None = None
    """Editor command for `e`; default $VISUAL, then $EDITOR, then vi."""


class TuiConfig(BaseModel):
    """The TUI's part of `.kopt/config.yaml`."""

    model_config = ConfigDict(extra="forbid")

    keys: dict[str, str] = Field(default_factory=dict)
    """Binding id -> key or comma-separated keys (Textual key names: `A`, `ctrl+r`, `f5`)."""
    tui: TuiSettings = Field(default_factory=TuiSettings)

    def editor_command(self) -> str:
        return self.tui.editor or os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"


def config_path() -> Path:
    return kopt_dir() / "config.yaml"


def load_config(path: Path | None = None, *, binding_ids: Iterable[str] = ()) -> TuiConfig:
    """Read the TUI sections of the config file (missing file: defaults).

    `binding_ids` are the ids the app knows; a `keys:` entry naming another id is an error
    that lists the valid ones, so a typo does not silently leave a key unmapped.
    """
    path = path or config_path()
    if not path.exists():
        return TuiConfig()
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise BadInputError(f"{path}: not valid YAML ({str(err).splitlines()[0]})",
                            fix="fix the file or delete it") from err
    if not isinstance(raw, dict):
        raise BadInputError(f"{path}: expected a mapping at the top level, found {raw!r}")
    section = {k: raw[k] for k in ("keys", "tui") if k in raw}
    if "keys" in section and isinstance(section["keys"], dict):
        section["keys"] = {str(k): str(v) for k, v in section["keys"].items()}
    try:
        config = TuiConfig.model_validate(section)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInputError(f"{path}: {where}: {first['msg']}",
                            fix="see workbench/config.py for the format") from err
    known = set(binding_ids)
    if known:
        unknown = sorted(set(config.keys) - known)
        if unknown:
            raise BadInputError(
                f"{path}: keys: unknown binding id {unknown[0]!r}",
                fix=f"expected one of {', '.join(repr(k) for k in sorted(known))}")
    return config
