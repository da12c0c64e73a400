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

from kopt.harness.errors import BadInputError, TargetError
from kopt.harness.paths import kopt_dir, workspace_root
from kopt.harness.targets.base import Target


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


def build_target(entry: TargetEntry, *, name: str | None = None) -> Target:
    """The `Target` an entry describes; `name` is what job records refer to it by."""
    from kopt.harness.targets.base import resolve_target

    if entry.spec.startswith("ssh://"):
        from kopt.harness.targets.ssh import SshOptions, SshTarget

        options = SshOptions(
            ssh_config=_expand(entry.ssh_config), identity_file=_expand(entry.identity_file),
            known_hosts=_expand(entry.known_hosts), ssh_options=list(entry.ssh_options))
        target = SshTarget(entry.spec, options=options, python=entry.python,
                           push_source=entry.push_source)
        if name:
            target.record_spec = name
        return target
    return resolve_target(entry.spec)


def named_target(name: str) -> Target:
    entries = load_targets()
    if name not in entries:
        known = ", ".join(sorted(entries)) or "none configured in targets.yaml"
        raise TargetError(f"unknown target {name!r}",
                          fix=f"expected 'local', ssh://[user@]host[:port][/path], ray://host:port "
                              f"or a name from targets.yaml ({known})")
    return build_target(entries[name], name=name)


def _expand(path: str | None) -> str | None:
    return str(Path(path).expanduser()) if path else None
