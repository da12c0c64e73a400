"""Named targets from `targets.yaml` (the workspace root, else `.kopt/targets.yaml`).

```yaml
targets:
  h100: ssh://me@gpu-box/scratch/kopt          # a spec alone
  lab:
    spec: ssh://lab-node:2222
    python: /opt/venv/bin/python               # the remote's interpreter (default python3)
    push_source: false                         # kopt is installed there
    identity_file: ~/.ssh/id_lab
    known_hosts: ~/.ssh/known_hosts_lab
    ssh_config: ~/.ssh/config_lab
    ssh_options: ["ProxyJump=bastion"]
  cluster: ray://head-node:10001
```
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from kopt.harness.errors import BadInputError
from kopt.harness.paths import kopt_dir, workspace_root


class TargetEntry(BaseModel):
    """One named target in `targets.yaml`."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    """`local`, `ssh://[user@]host[:port][/workspace]` or `ray://host:port`."""
    python: str | None = None
    """The remote interpreter (ssh); default `python3`."""
    push_source: bool | None = None
    """False when kopt is installed on the remote (ssh); default: push `harness/`."""
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_config: str | None = None
    ssh_options: list[str] = []
    """Extra `-o Key=Value` options for ssh."""


class TargetsFile(BaseModel):
    """`targets.yaml`: names to target entries."""

    model_config = ConfigDict(extra="forbid")

    targets: dict[str, TargetEntry | str] = {}


def targets_file() -> Path | None:
    """`targets.yaml` at the workspace root, else `.kopt/targets.yaml`, else None."""
    for file in (workspace_root() / "targets.yaml", kopt_dir() / "targets.yaml"):
        if file.is_file():
            return file
    return None


def load_targets() -> dict[str, TargetEntry]:
    """The configured targets by name (empty without a targets.yaml)."""
    file = targets_file()
    if file is None:
        return {}
    try:
        data = yaml.safe_load(file.read_text()) or {}
        parsed = TargetsFile.model_validate(data)
    except yaml.YAMLError as err:
        raise BadInputError(f"{file}: not valid YAML ({str(err).splitlines()[0]})",
                            fix="see harness/targets/registry.py for the format") from err
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInputError(f"{file}: {where}: {first['msg']}",
                            fix="each target is a spec string or {spec: ..., python: ..., ...}") from err
    entries: dict[str, TargetEntry] = {}
    for name, entry in parsed.targets.items():
        if name == "local" or "://" in name:
            raise BadInputError(f"{file}: target name {name!r} is reserved",
                                fix="pick a plain name such as 'h100'")
        entries[name] = entry if isinstance(entry, TargetEntry) else TargetEntry(spec=entry)
    return entries


def expand_path(path: str | None) -> str | None:
    return str(Path(path).expanduser()) if path else None
