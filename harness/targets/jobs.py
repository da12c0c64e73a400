"""Records of jobs started on a remote target, so that they can be listed, re-attached and
cancelled after the connection (or the `kopt` process) that started them is gone.

One JSON file per job under `.kopt/remote-jobs/<id>.json`: parallel evaluations write
different files, so no lock is needed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kopt.harness.errors import BadInputError
from kopt.harness.paths import kopt_dir

JobState = Literal["running", "done", "timed_out", "cancelled", "lost", "fetched"]

KEEP_RECORDS = 200
"""Finished records beyond this many (oldest first) are pruned when a new job starts."""


class JobRecord(BaseModel):
    """A worker job started on a remote target."""

    model_config = ConfigDict(extra="forbid")

    id: str
    """Short id shown by `kopt jobs` (also the remote job directory's name)."""
    target: str
    """The target spec it runs on (`ssh://...`)."""
    job: str
    """The worker job name from `request.json` (`measure`, `candidate`, `echo`, ...)."""
    local_dir: str
    """The local job directory; `out/` is copied back into it."""
    remote_dir: str
    """The job directory on the remote host."""
    timeout_s: float
    """The worker's time limit, enforced on the remote."""
    started_at: float = Field(default_factory=time.time)
    """Unix time the job was started."""
    state: JobState = "running"
    """Last known state: `running`; `done`/`timed_out`/`cancelled`/`lost` on the remote;
    `fetched` once `out/` is back here."""
    returncode: int | None = None
    """The worker's exit status once it ended."""
    note: str = ""
    """What started it (`kopt jobs submit`, `verify`, ...)."""

    @property
    def finished(self) -> bool:
        return self.state != "running"


def records_dir() -> Path:
    return kopt_dir() / "remote-jobs"


def new_job_id() -> str:
    return time.strftime("%m%d-%H%M%S-") + uuid.uuid4().hex[:4]


def save(record: JobRecord) -> None:
    directory = records_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{record.id}.json.tmp"
    tmp.write_text(record.model_dump_json(indent=1))
    os.replace(tmp, directory / f"{record.id}.json")


def load(job_id: str) -> JobRecord:
    """The record of `job_id` (a unique prefix is enough)."""
    directory = records_dir()
    exact = directory / f"{job_id}.json"
    if exact.is_file():
        return JobRecord.model_validate_json(exact.read_text())
    matches = sorted(directory.glob(f"{job_id}*.json")) if directory.is_dir() else []
    if len(matches) == 1:
        return JobRecord.model_validate_json(matches[0].read_text())
    known = ", ".join(r.id for r in list_records()[:5]) or "none"
    if not matches:
        raise BadInputError(f"no remote job {job_id!r}", fix=f"`kopt jobs` lists them (recent: {known})")
    raise BadInputError(f"job id {job_id!r} is ambiguous",
                        fix=f"give more of it: {', '.join(m.stem for m in matches)}")


def list_records() -> list[JobRecord]:
    """All records, newest first; unreadable files are skipped."""
    directory = records_dir()
    if not directory.is_dir():
        return []
    records: list[JobRecord] = []
    for file in directory.glob("*.json"):
        try:
            records.append(JobRecord.model_validate_json(file.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(records, key=lambda r: r.started_at, reverse=True)


def update(record: JobRecord, **changes: Any) -> JobRecord:
    new = record.model_copy(update=changes)
    save(new)
    return new


def prune(keep: int = KEEP_RECORDS) -> None:
    finished = [r for r in list_records() if r.finished]
    for record in finished[keep:]:
        try:
            (records_dir() / f"{record.id}.json").unlink()
        except OSError:
            pass


def summary_row(record: JobRecord) -> dict[str, Any]:
    return json.loads(record.model_dump_json())
