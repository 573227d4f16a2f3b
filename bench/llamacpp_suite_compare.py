"""Compare two runs of llama.cpp's server test suite: one against a real llama-server, one
against `lookahead serve`, both on the same model (`tests/compat/run_llamacpp_suite.sh
--junit FILE`). What counts is the share of the tests that pass on llama-server that also
pass on lookahead: the suite checks some things only llama.cpp's tiny test models write, and
those fail on llama-server too with another model.

    python bench/llamacpp_suite_compare.py llama-server.xml lookahead.xml \
        --out bench/results/llamacpp-suite-COMMIT --note "2-vCPU AMD EPYC, shared"

writes OUT.json (per test: its outcome on each side) and OUT.md (a table per file, and the
tests that pass on llama-server and not on lookahead). Several lookahead files may be given
(a full run, then a rerun of some tests at a later commit): a test's outcome is its last.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

Outcomes = dict[str, str]  # "unit/test_x.py::test_y[param]" -> passed / failed / skipped / error


def read_junit(path: Path) -> Outcomes:
    """Each test case's outcome in a pytest junit XML file."""
    out: Outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        name = f"{module}.py::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            out[name] = "failed"
        elif "error" in kinds:
            out[name] = "error"
        elif "skipped" in kinds:
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


def compare(reference: Outcomes, candidate: Outcomes) -> dict[str, object]:
    """Per file: tests run on both, passing on the reference, of those passing on the
    candidate (tests only one side ran are listed apart, not counted)."""
    files: dict[str, dict[str, int]] = defaultdict(lambda: {"tests": 0, "reference": 0, "both": 0, "candidate": 0})
    lost = []
    both_ran = set(reference) & set(candidate)  # a run cut short compares on what both ran
    for name in sorted(both_ran):
        row = files[name.split("::")[0]]
        row["tests"] += 1
        ref_ok = reference.get(name) == "passed"
        cand_ok = candidate.get(name) == "passed"
        row["reference"] += ref_ok
        row["candidate"] += cand_ok
        row["both"] += ref_ok and cand_ok
        if ref_ok and not cand_ok:
            lost.append(name)
    total = {k: sum(r[k] for r in files.values()) for k in ("tests", "reference", "both", "candidate")}
    return {
        "files": dict(files),
        "total": total,
        "ratio": total["both"] / total["reference"] if total["reference"] else None,
        "pass_on_llama_server_only": lost,
        "pass_on_lookahead_only": sorted(
            n for n in both_ran if candidate[n] == "passed" and reference[n] != "passed"
        ),
        "run_on_one_side_only": sorted(set(reference) ^ set(candidate)),
        "tests": {n: {"llama-server": reference.get(n), "lookahead": candidate.get(n)} for n in sorted(both_ran)},
    }


def table(result: dict[str, object], note: str) -> str:
    files = result["files"]
    assert isinstance(files, dict)
    lines = [
        "# llama.cpp's server tests: llama-server and lookahead serve on the same model",
        "",
        note,
        "",
        "| file | tests | pass on llama-server | of those, pass on lookahead | pass on lookahead |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in sorted(files.items()) + [("total", result["total"])]:
        assert isinstance(row, dict)
        lines.append(f"| {name} | {row['tests']} | {row['reference']} | {row['both']} | {row['candidate']} |")
    ratio = result["ratio"]
    lines += ["", f"Ratio: {ratio:.1%}" if isinstance(ratio, float) else "Ratio: n/a", ""]
    lost = result["pass_on_llama_server_only"]
    assert isinstance(lost, list)
    if lost:
        lines += ["Passing on llama-server, not on lookahead:", ""] + [f"- `{n}`" for n in lost] + [""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reference", type=Path, help="junit XML of the run against llama-server")
    p.add_argument("candidate", type=Path, nargs="+", help="junit XML of the run(s) against lookahead serve")
    p.add_argument("--out", type=Path, required=True, help="write OUT.json and OUT.md")
    p.add_argument("--note", default="", help="the machine and model, written above the table")
    args = p.parse_args()
    candidate: Outcomes = {}
    for path in args.candidate:
        candidate.update(read_junit(path))
    result = compare(read_junit(args.reference), candidate)
    result["note"] = args.note
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(table(result, args.note))
    print(table(result, args.note))


if __name__ == "__main__":
    main()
