"""The archive bundle of a finished run: `archive/<UTC timestamp>-<case>-<speedup>x/`
(`-cpu-verified` instead of a figure for a CPU-interpreter run, `-keep-pytorch-0.83x` when the
kernel is no faster than eager).

It holds the final kernel, every manifest, the engineers' transcripts and logs, profiler
traces, metrics, `report.md` (+ chart) and `REPRODUCE.md` (the commands that re-verify and
re-time the kernel). It is built in a temporary folder beside its destination and renamed
into place, so a reader never sees half an archive. Before the rename every text file is
scanned for the Anthropic API key's value (and `sk-ant-` tokens) and redacted; the scan's
result is part of the archive's `MANIFEST.txt`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kopt.harness.speedup import speedup_slug

SECRET_RE = re.compile(rb"sk-ant-[A-Za-z0-9_\-]{8,}")
REDACTED = b"[redacted]"
TEXT_SUFFIXES = {".py", ".json", ".jsonl", ".md", ".txt", ".log", ".yaml", ".yml", ".csv"}


@dataclass
class ArchiveContents:
    """What goes into one archive."""

    case: str
    run_id: str
    speedup: float | None
    kernel: Path
    manifests: list[Path]
    report: Path
    chart: Path | None
    run_dir: Path
    """manifests/<run-id>/: transcripts/, artifacts/ (metrics, traces), per-phase logs."""
    reproduce: str


def archive_name(case: str, speedup: float | None, when: float | None = None, *,
                 timing_label: str | None = None, keep: str | None = None) -> str:
    """`<timestamp>-<case>-<speedup>x` (`harness.speedup.format_speedup`); a run whose kernel
    does not pay says what to keep before its figure (`...-keep-pytorch-0.83x`,
    `...-keep-compile-1.4x`); a CPU-interpreter run has no figure (`...-cpu-verified`)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when or time.time()))
    slug = speedup_slug(speedup, timing_label)
    if keep and slug != "cpu-verified":
        slug = f"keep-{keep}-{slug}"
    return f"{stamp}-{case}-{slug}"


def secrets_to_scan() -> list[bytes]:
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    return [key.encode()] if len(key) >= 8 else []


def redact_tree(root: Path) -> list[str]:
    """Redact secrets in every file under `root`; the paths that held one."""
    found = []
    values = secrets_to_scan()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        clean = data
        for v in values:
            clean = clean.replace(v, REDACTED)
        if path.suffix in TEXT_SUFFIXES:
            clean = SECRET_RE.sub(REDACTED, clean)
        if clean != data:
            path.write_bytes(clean)
            found.append(str(path.relative_to(root)))
    return found


def write_archive(contents: ArchiveContents, archive_root: Path, *,
                  name: str | None = None) -> Path:
    """Build the bundle in a temp folder under `archive_root`, then rename it into place."""
    archive_root.mkdir(parents=True, exist_ok=True)
    name = name or archive_name(contents.case, contents.speedup)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=archive_root))
    try:
        shutil.copy2(contents.kernel, tmp / f"{contents.case}.py")
        (tmp / "manifests").mkdir()
        for m in contents.manifests:
            shutil.copy2(m, tmp / "manifests" / m.name)
        shutil.copy2(contents.report, tmp / "report.md")
        if contents.chart is not None and contents.chart.is_file():
            shutil.copy2(contents.chart, tmp / contents.chart.name)
        for sub in ("transcripts", "artifacts", "logs"):
            src = contents.run_dir / sub
            if src.is_dir():
                shutil.copytree(src, tmp / sub)
        for phase_dir in ("optimizer", "accelerator", "architect", "integrator"):
            src = contents.run_dir / phase_dir
            if src.is_dir():
                shutil.copytree(src, tmp / "phases" / phase_dir,
                                ignore=shutil.ignore_patterns("report.md", "*.png"))
        (tmp / "REPRODUCE.md").write_text(contents.reproduce)
        redacted = redact_tree(tmp)
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        (tmp / "MANIFEST.txt").write_text(
            f"run {contents.run_id} of {contents.case}\n"
            f"secret scan: {'redacted in ' + ', '.join(redacted) if redacted else 'clean'}\n\n"
            + "\n".join(files) + "\n")
        final = archive_root / name
        n = 1
        while final.exists():
            n += 1
            final = archive_root / f"{name}-{n}"
        os.rename(tmp, final)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def reproduce_text(case: str, case_dir: Path, run_id: str, branch: str, commit: str | None,
                   kernel_name: str, label: str) -> str:
    return f"""# Reproduce run {run_id} ({case})

The kernel in this folder, `{kernel_name}`, is commit `{commit}` on branch `{branch}`.
Timings in the report are `{label}`.

Re-verify it (fresh seeds, every declared shape):

    kopt verify {case} {kernel_name}

Re-time it against eager and torch.compile on this machine:

    kopt bench {case} {kernel_name}

Or from the branch:

    git show {commit}:kernels/{case}.py > /tmp/{case}.py && kopt verify {case} /tmp/{case}.py

The case is `{case_dir}` (its manifest.yaml and model.py are in `case/` on the branch).
"""
