"""`kopt export`: a run's approved kernels as a self-contained package for the user's code.

The package directory (default `.kopt/exports/<run-id>/kopt_<case>/`) holds `kernels.py`
(the candidate at the approved commit: Triton kernels and `ModelNew`), `__init__.py`
(`apply(model)`, `unapply(model)`, from `templates/export_init.py`), `case.json` (the
structure the kernels were verified for: constructor arguments, state_dict keys, shapes and
dtypes, the modules' scalar settings) and `README.md` (usage, verification, timings).
It imports torch and triton only, never kopt.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kopt.harness.case import Case, load_case
from kopt.harness.errors import BadInputError

TEMPLATE = Path(__file__).parent / "templates" / "export_init.py"


@dataclass(frozen=True)
class ExportResult:
    """Where the package went and what it holds."""

    path: Path
    """The package directory (its name is the import name)."""
    case: str
    run_id: str | None
    commit: str | None
    approval: str
    """`approved`, or `pending` (exported with --unapproved)."""
    class_name: str = "Model"
    """The user's model class the package patches."""

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "case": self.case, "run_id": self.run_id,
                "commit": self.commit, "approval": self.approval,
                "import_name": self.path.name, "class": self.class_name}


_SETTING_TYPES = (bool, int, float, str)


def module_settings(model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """Each module's public scalar attributes (head counts, eps, strides...): the structure a
    state_dict does not show. The same function as the package's (templates/export_init.py,
    which cannot import kopt); tests/test_export.py checks they agree."""
    out: dict[str, dict[str, Any]] = {}
    for path, mod in model.named_modules():
        values = {}
        for k, v in vars(mod).items():
            if k.startswith("_") or k == "training":
                continue
            if isinstance(v, tuple) and all(isinstance(x, _SETTING_TYPES) for x in v):
                v = list(v)
            if isinstance(v, _SETTING_TYPES) or (isinstance(v, list) and
                                                 all(isinstance(x, _SETTING_TYPES) for x in v)):
                values[k] = v
        if values:
            out[path or "(model)"] = values
    return out


def case_structure(case: Case, input_set: str = "main") -> dict[str, Any]:
    """`case.json`'s structure part: the case's model built on `meta` for `input_set`."""
    from kopt.harness.data import instantiate, model_class
    resolved = case.input_set(input_set)
    with torch.device("meta"):
        model = instantiate(model_class(case), resolved, case.model_file)
    return {"case": case.name, "class": case.manifest.model.class_name,
            "input_set": input_set, "init_args": list(resolved.init_args),
            "init_kwargs": dict(resolved.init_kwargs),
            "state": [[k, list(t.shape), str(t.dtype)] for k, t in model.state_dict().items()],
            "settings": module_settings(model)}


def usage_snippet(class_name: str, package: str) -> str:
    """The lines a user adds to their code (README.md and report.md show them)."""
    return (f"import sys\n"
            f"sys.path.insert(0, \"<folder that holds {package}/>\")\n"
            f"import {package}\n\n"
            f"model = {class_name}(...)      # your model, your weights\n"
            f"model.load_state_dict(torch.load(\"weights.pt\"))   # as usual\n"
            f"{package}.apply(model)   # forward now runs the verified Triton kernels\n"
            f"out = model(x)\n"
            f"{package}.unapply(model)  # back to the original forward")


def build_package(case: Case, source: str, out: Path, *, input_set: str = "main",
                  run_id: str | None = None, commit: str | None = None,
                  approval: str = "approved", verification: dict[str, Any] | None = None,
                  timing: dict[str, Any] | None = None) -> ExportResult:
    """Write the package for candidate `source` into directory `out` (replaced if present)."""
    out = Path(out)
    if not out.name.isidentifier():
        raise BadInputError(f"package folder name {out.name!r} is not a Python identifier",
                            fix="name the --out folder like a module, e.g. kopt_" + case.name)
    if "class ModelNew" not in source:
        raise BadInputError(f"the kernel of {case.name!r} defines no ModelNew",
                            fix="export a run whose iteration produced a candidate")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "kernels.py").write_text(source)
    shutil.copy2(TEMPLATE, tmp / "__init__.py")
    structure = case_structure(case, input_set)
    meta = {**structure, "run_id": run_id, "commit": commit, "approval": approval}
    (tmp / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    (tmp / "README.md").write_text(_readme(case, out.name, meta, verification, timing))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return ExportResult(out, case.name, run_id, commit, approval, meta["class"])


def _readme(case: Case, package: str, meta: dict[str, Any], verification: dict[str, Any] | None,
            timing: dict[str, Any] | None) -> str:
    lines = [f"# {package}: kopt kernels for `{case.name}`", "",
             case.manifest.description.strip(), "",
             f"Run `{meta['run_id']}`, commit `{meta['commit']}` ({meta['approval']}). "
             f"Generated and verified for `{meta['class']}(*{meta['init_args']!r}, "
             f"**{meta['init_kwargs']!r})`.", "",
             "## Use", "", "```python", usage_snippet(meta["class"], package), "```", "",
             "`apply` checks the model first: state_dict keys, shapes and dtypes and the "
             "modules' scalar settings (head counts, eps, ...) must be the case's; otherwise it "
             "raises ValueError naming the first difference. The model keeps its parameters "
             "(the same objects): `state_dict()`, `.to()`, `load_state_dict()` work as before.",
             "", "Files: `kernels.py` (the Triton kernels and `ModelNew`, readable), "
             "`__init__.py` (`apply`, `unapply`), `case.json` (the verified structure).",
             "Needs torch and triton (a GPU; on a CPU, `TRITON_INTERPRET=1` runs the kernels "
             "slowly through Triton's interpreter)."]
    if verification:
        lines += ["", "## Verification", "",
                  f"{'accepted' if verification.get('accepted') else 'REJECTED'} on input sets "
                  f"{', '.join(verification.get('input_sets') or [])}."]
    if timing and timing.get("eager_ms"):
        lines += ["", f"## Timing ({timing.get('timing_label')})", "",
                  "| variant | median ms |", "| --- | ---: |",
                  f"| eager | {timing.get('eager_ms'):.4g} |",
                  f"| torch.compile | {timing.get('compile_ms') or float('nan'):.4g} |",
                  f"| kopt | {timing.get('candidate_ms') or float('nan'):.4g} |"]
    return "\n".join(lines) + "\n"


def export_run(run_id: str, out: Path | None = None, *, unapproved: bool = False) -> ExportResult:
    """Export run `run_id`'s approved kernel (or, with `unapproved`, its best verified one)."""
    from kopt.harness.paths import kopt_dir, manifests_dir
    from kopt.phases import history

    run = history.get_run(run_id)
    state = run.approval.get("state", "pending")
    if state == "rejected":
        raise BadInputError(f"run {run_id!r} was rejected",
                            fix=f"approve a commit first: kopt approve {run_id} COMMIT")
    if state == "approved":
        commit = run.approval.get("commit")
    elif unapproved:
        best = run.best()
        commit = best.commit if best else None
        if commit is None:
            raise BadInputError(f"run {run_id!r} has no verified iteration to export",
                                fix=f"finish the run: kopt run --resume {run_id}")
    else:
        raise BadInputError(f"run {run_id!r} is not approved",
                            fix=f"kopt approve {run_id}, or pass --unapproved to export its "
                                f"best verified iteration")
    case = load_case(_case_dir(run, run_id))
    source = history.show_file(str(commit), f"kernels/{run.case}.py")
    integ = manifests_dir() / run_id / "integrator.json"
    details = json.loads(integ.read_text()).get("details", {}) if integ.is_file() else {}
    out = Path(out) if out is not None else kopt_dir() / "exports" / run_id / f"kopt_{run.case}"
    return build_package(case, source, out, run_id=run_id, commit=str(commit),
                         approval=state if state == "approved" else "pending",
                         verification=details.get("verification"), timing=details.get("timing"))


def _case_dir(run: Any, run_id: str) -> Path | str:
    """The run's own copy of the case (its worktree's `case/`), else the case by name."""
    if run.worktree and (Path(run.worktree) / "case" / "manifest.yaml").is_file():
        return Path(run.worktree) / "case"
    return run.case
