"""Issue 5's CI bar: every bundled case gets a candidate from the offline engineer that the
real verifier accepts on the CPU (Triton interpreter, smoke inputs plus every `shapes` entry).

This is the product's main promise without a GPU or a key, so it runs the whole verifier
(fresh seeds, poisoned allocations, in-place input changes, isolated reference), not an
in-process comparison.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt.harness.case import case_directories, load_case
from kopt.harness.verify import verify_candidate
from kopt.phases.engineers.offline import generate_candidate

BUNDLED = sorted(d.name for d in case_directories())


def test_at_least_eleven_bundled_cases() -> None:
    assert len(BUNDLED) >= 11


@pytest.mark.parametrize("name", BUNDLED)
def test_offline_candidate_is_accepted(name: str, workspace: Path) -> None:
    case = load_case(name)
    result = generate_candidate(case)
    file = workspace / f"{name}_candidate.py"
    file.write_text(result.source)
    report = verify_candidate(case, file, device="cpu")
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.passed]
    assert report.accepted, f"{name} rejected:\n" + "\n".join(failed)
    names = {c.name for c in report.checks}
    assert {"correct", "every_element_written", "triton_launched", "no_pytorch_fallback"} <= names


KERNELBENCH = sorted((Path(__file__).parent / "kernelbench").glob("*.py"))


@pytest.mark.parametrize("problem", KERNELBENCH, ids=lambda p: p.stem)
def test_imported_kernelbench_problem_is_accepted(problem: Path, workspace: Path) -> None:
    """Issue 5: a KernelBench-style problem imported with `kopt import-kernelbench` whose ops
    fall in the offline engineer's families gets a candidate the verifier accepts."""
    from kopt.harness.kernelbench import import_kernelbench

    case = load_case(import_kernelbench(problem, out=workspace / "cases" / problem.stem))
    file = workspace / f"{problem.stem}_candidate.py"
    file.write_text(generate_candidate(case, input_set="smoke").source)
    report = verify_candidate(case, file, device="cpu")
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.passed]
    assert report.accepted, f"{problem.stem} rejected:\n" + "\n".join(failed)
