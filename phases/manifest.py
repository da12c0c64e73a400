"""Phase manifests: the validated JSON hand-off between phases (docs/CASES.md "Phases and manifests").

A manifest lives at `manifests/<run-id>/<phase>.json`. Its envelope (`schemas/envelope.json`)
is the same for every phase; its `details` follow the phase's own schema
(`schemas/<phase>.json`; the architect's plan follows `schemas/plan.json`). A manifest is
validated when written (atomically: temp file, then rename) and when read. File paths in
`inputs`/`outputs` are relative to the workspace root; a phase that takes over checks the
sha256 of every one of them (`check_handoff`) and refuses to start on any mismatch.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from kopt.harness.errors import ManifestError
from kopt.harness.paths import workspace_root

SCHEMA_ID = "kopt.manifest/v1"
PHASES = ("architect", "optimizer", "accelerator", "integrator")
SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"
STATUSES = ("verified", "failed", "cancelled")


@cache
def _schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS_DIR / f"{name}.json").read_text(encoding="utf-8"))


@cache
def _registry() -> Registry:
    resources = [(_schema(n)["$id"], Resource.from_contents(_schema(n)))
                 for n in ("envelope", "plan", *PHASES)]
    return Registry().with_resources(resources)


def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(_schema(name), registry=_registry())


def _pointer(prefix: str, path: Any) -> str:
    return prefix + "".join(f"/{p}" for p in path) or "/"


def schema_errors(data: Any, name: str, prefix: str = "") -> list[str]:
    """Every violation of schema `name` as `<JSON pointer>: <message>`, most relevant first."""
    errors = sorted(_validator(name).iter_errors(data),
                    key=lambda e: jsonschema.exceptions.relevance(e))
    return [f"{_pointer(prefix, e.absolute_path) or '/'}: {e.message}" for e in errors]


def validation_errors(data: Any) -> list[str]:
    """Envelope, then the phase's `details`: an empty list when `data` is a valid manifest."""
    errors = schema_errors(data, "envelope")
    if errors:
        return errors
    return schema_errors(data["details"], data["phase"], prefix="/details")


def plan_errors(plan: Any) -> list[str]:
    """Violations of the plan schema (an analyst's answer)."""
    return schema_errors(plan, "plan")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class FileRef:
    """A file a manifest names, and its content hash when the manifest was written."""

    path: str
    """Relative to the workspace root (absolute only when outside it)."""
    sha256: str

    @classmethod
    def of(cls, path: Path, root: Path | None = None) -> FileRef:
        root = (root or workspace_root()).resolve()
        path = Path(path).resolve()
        try:
            rel = str(path.relative_to(root))
        except ValueError:
            rel = str(path)
        return cls(rel, sha256_file(path))

    def resolve(self, root: Path | None = None) -> Path:
        p = Path(self.path)
        return p if p.is_absolute() else (root or workspace_root()) / p


@dataclass
class Manifest:
    """One phase's hand-off (the envelope of docs/CASES.md; `details` per phase)."""

    phase: str
    run_id: str
    case: str
    status: str
    """verified | failed | cancelled: only a `verified` manifest lets the next phase start."""
    branch: str
    commit: str | None
    """The run branch's tip when the phase finished."""
    baseline_ms: float | None = None
    best_ms: float | None = None
    speedup: float | None = None
    timing_label: str | None = None
    """cuda-events | cpu-interpreter: CPU timings are never GPU figures."""
    inputs: list[FileRef] = field(default_factory=list)
    outputs: list[FileRef] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime()))

    def to_dict(self) -> dict[str, Any]:
        bench: dict[str, Any] = {"baseline_ms": self.baseline_ms, "best_ms": self.best_ms,
                                 "speedup": self.speedup}
        if self.timing_label:
            bench["timing_label"] = self.timing_label
        return {"schema": SCHEMA_ID, "phase": self.phase, "run_id": self.run_id,
                "case": self.case,
                "inputs": [{"path": f.path, "sha256": f.sha256} for f in self.inputs],
                "outputs": [{"path": f.path, "sha256": f.sha256} for f in self.outputs],
                "benchmarks": bench, "git": {"branch": self.branch, "commit": self.commit},
                "status": self.status, "created": self.created, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        b = data["benchmarks"]
        return cls(phase=data["phase"], run_id=data["run_id"], case=data["case"],
                   status=data["status"], branch=data["git"]["branch"],
                   commit=data["git"]["commit"], baseline_ms=b.get("baseline_ms"),
                   best_ms=b.get("best_ms"), speedup=b.get("speedup"),
                   timing_label=b.get("timing_label"),
                   inputs=[FileRef(f["path"], f["sha256"]) for f in data["inputs"]],
                   outputs=[FileRef(f["path"], f["sha256"]) for f in data["outputs"]],
                   details=data["details"], created=data.get("created", ""))

    def output(self, suffix: str) -> FileRef | None:
        """The first output whose path ends with `suffix`."""
        return next((f for f in self.outputs if f.path.endswith(suffix)), None)


def manifest_path(run_dir: Path, phase: str) -> Path:
    return run_dir / f"{phase}.json"


def write_manifest(manifest: Manifest, path: Path) -> Path:
    """Validate, then write atomically (temp file + rename). Raises `ManifestError` if invalid."""
    data = manifest.to_dict()
    errors = validation_errors(json.loads(json.dumps(data, default=str)))
    if errors:
        raise ManifestError(f"{path}: refusing to write an invalid {manifest.phase} manifest: "
                            f"{errors[0]}", fix="this is a kopt bug; please report it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_json(path: Path) -> Any:
    if not path.is_file():
        raise ManifestError(f"{path}: no such manifest", fix="check the run id and phase")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ManifestError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})",
                            fix="restore the file or re-run the phase") from None


def read_manifest(path: Path) -> Manifest:
    """Load and validate a manifest; `ManifestError` names the file and the failing key path."""
    data = load_json(path)
    errors = validation_errors(data)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ManifestError(f"{path}: {errors[0]}{more}",
                            fix="restore the manifest or re-run its phase")
    return Manifest.from_dict(data)


def changed_files(manifest: Manifest, root: Path | None = None) -> list[str]:
    """Files the manifest names whose content is missing or differs: `path: why` lines."""
    problems = []
    for ref in manifest.inputs + manifest.outputs:
        file = ref.resolve(root)
        if not file.is_file():
            problems.append(f"{ref.path}: missing")
            continue
        actual = sha256_file(file)
        if actual != ref.sha256:
            problems.append(f"{ref.path}: sha256 {actual[:12]}... != recorded {ref.sha256[:12]}...")
    return problems


def check_handoff(run_dir: Path, phase: str, *, run_id: str | None = None,
                  root: Path | None = None) -> Manifest:
    """The manifest of `phase` that the next phase takes over: valid schema, status verified,
    every listed file unchanged. Otherwise `ManifestError` naming the file and the mismatch."""
    path = manifest_path(run_dir, phase)
    manifest = read_manifest(path)
    if manifest.phase != phase:
        raise ManifestError(f"{path}: /phase is {manifest.phase!r}, expected {phase!r}",
                            fix="restore the manifest or re-run its phase")
    if run_id is not None and manifest.run_id != run_id:
        raise ManifestError(f"{path}: /run_id is {manifest.run_id!r}, expected {run_id!r}",
                            fix="restore the manifest or re-run its phase")
    if manifest.status != "verified":
        raise ManifestError(f"{path}: /status is {manifest.status!r}, not 'verified'; "
                            f"the next phase will not start",
                            fix=f"re-run the {phase} phase (kopt run --resume {manifest.run_id})")
    problems = changed_files(manifest, root)
    if problems:
        raise ManifestError(f"{path}: a file it lists changed since it was written: {problems[0]}",
                            fix=f"restore the file or re-run the {phase} phase")
    return manifest


def record_decision(run_dir: Path, *, state: str, commit: str | None, reason: str | None,
                    decision_commit: str) -> Manifest:
    """Write the user's decision into the integrator manifest (validated, atomically): the
    mirror of what git records (`history.approve`, `reject`, `undo_decision`)."""
    path = manifest_path(run_dir, "integrator")
    if not path.is_file():
        raise ManifestError(f"{path}: the run has no integrator manifest yet",
                            fix="finish the run (kopt run --resume RUN_ID) before deciding")
    manifest = read_manifest(path)
    manifest.details["approval"] = {"state": state, "commit": commit, "reason": reason,
                                    "decision_commit": decision_commit,
                                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_manifest(manifest, path)
    return manifest
