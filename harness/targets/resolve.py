"""`resolve_target(spec)`: the Target a `--target` spec names.

Separate from `base` (the protocol every target implements) so that the implementations
(`local`, `ssh`, `ray`, named ones from `targets.yaml`) import `base` and nothing imports
back up: `resolve` sits on top of them all.
"""

from __future__ import annotations

from kopt.harness.errors import TargetError
from kopt.harness.targets import registry
from kopt.harness.targets.base import _REGISTRY, Target


def resolve_target(spec: str | None = None) -> Target:
    """`local` (default), `ssh://[user@]host[:port][/path]`, `ray://host:port`, or a name
    from `targets.yaml`."""
    from kopt.harness.targets.local import LocalTarget

    if not spec or spec == "local":
        return LocalTarget()
    scheme = spec.split("://", 1)[0] if "://" in spec else None
    if scheme is None:
        return named_target(spec)
    if scheme not in _REGISTRY:
        _load_builtin_schemes()
    if scheme not in _REGISTRY:
        raise TargetError(f"unknown target scheme {scheme!r} in {spec!r}",
                          fix=f"expected 'local' or one of {sorted(_REGISTRY)}:// ")
    return _REGISTRY[scheme](spec)


def _load_builtin_schemes() -> None:
    import importlib

    for mod in ("kopt.harness.targets.ssh", "kopt.harness.targets.ray"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass


def build_target(entry: registry.TargetEntry, *, name: str | None = None) -> Target:
    """The `Target` an entry describes; `name` is what job records refer to it by."""
    if entry.spec.startswith("ssh://"):
        from kopt.harness.targets.ssh import SshOptions, SshTarget

        options = SshOptions(
            ssh_config=registry.expand_path(entry.ssh_config), identity_file=registry.expand_path(entry.identity_file),
            known_hosts=registry.expand_path(entry.known_hosts), ssh_options=list(entry.ssh_options))
        target = SshTarget(entry.spec, options=options, python=entry.python,
                           push_source=entry.push_source)
        if name:
            target.record_spec = name
        return target
    return resolve_target(entry.spec)


def named_target(name: str) -> Target:
    entries = registry.load_targets()
    if name not in entries:
        known = ", ".join(sorted(entries)) or "none configured in targets.yaml"
        raise TargetError(f"unknown target {name!r}",
                          fix=f"expected 'local', ssh://[user@]host[:port][/path], ray://host:port "
                              f"or a name from targets.yaml ({known})")
    return build_target(entries[name], name=name)
