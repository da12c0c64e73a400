"""Names a user gives kopt (run ids, case names, target names) before they become paths.

A name becomes a folder (`manifests/<run-id>/`, `cases/<name>/`), a branch component
(`kopt/<case>/<run-id>`) and a file stem, so it is checked before anything is written:
letters, digits, `.`, `_` and `-`, starting with a letter or digit, at most 100 characters.
That refuses `../../x`, `/abs/path` and `my run` with one line naming the value and the fix.
"""

from __future__ import annotations

import re

from kopt.harness.errors import BadInputError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(value: str, what: str) -> str:
    """`value` if it is a safe name for `what` (e.g. "run id"), else a BadInputError."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value \
            or value.endswith((".", ".lock")):
        raise BadInputError(
            f"{what} {value!r} is not a valid name",
            fix="use letters, digits, '.', '_' and '-', starting with a letter or digit, "
                "up to 100 characters, no '..'")
    return value
