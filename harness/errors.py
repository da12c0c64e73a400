"""The errors kopt shows to a user.

Every failure a user can cause or fix is a `KoptError`: printed as one line that names the
thing and the fix, never as a traceback (unless `--debug`). `exit_code` is what the CLI
returns for it.
"""

from __future__ import annotations


class KoptError(Exception):
    """A failure with a one-line message for the user."""

    exit_code = 2

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.message} ({self.fix})" if self.fix else self.message


class BadInputError(KoptError):
    """Input the user gave is wrong: a missing file, an unknown name, a malformed value."""


class CaseError(BadInputError):
    """A case directory, its manifest.yaml or its model.py is unusable."""

    def __init__(
        self,
        file: object,
        message: str,
        *,
        key: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.file = str(file)
        self.key = key
        where = f"{self.file}: {key}: " if key else f"{self.file}: "
        super().__init__(where + message, fix=fix)


class UnknownCaseError(BadInputError):
    """A CASE argument names neither a bundled case nor a case directory."""


class DeviceError(BadInputError):
    """The requested device is not available on this machine."""


class ManifestError(KoptError):
    """A phase manifest is malformed, unverified, or names files whose sha256 changed."""


class WorkerError(KoptError):
    """A worker subprocess failed in a way that is not the candidate's fault."""

    exit_code = 1


class TargetError(KoptError):
    """An execution target (local, ssh://, ray://) is unusable."""


class TargetLost(TargetError):
    """A target went away mid-job (connection dropped, node or Ray worker died): the job was
    not the candidate's fault and can be re-run elsewhere (`harness.parallel` re-queues it)."""

    exit_code = 1


class GitError(KoptError):
    """The workbench's git repository is missing or in a state kopt cannot work with."""


class EngineerError(KoptError):
    """An engineer (offline, anthropic, replay) could not produce a candidate."""

    exit_code = 1


class NothingToGenerate(EngineerError):
    """The model has no op the offline engineer generates (every compute op a library call it
    keeps whole, such as a cuDNN recurrent layer, or nothing to compute): PyTorch is the
    answer for it, not a failure of the engineer."""


class RegressionError(KoptError):
    """A step would accept a kernel measured slower than eager PyTorch (`kopt approve` without
    `--force`): a negative verdict, exit 1."""

    exit_code = 1
