"""Issue 35 item 6's table: `kopt-mcp init --write` on fresh clones of seven real kernels, one row each,
from the OUT/<name>-fresh.json files init_fresh.py writes (init_fresh.py `--project all` writes it at its
end; this script writes it again from what is there, e.g. after one kernel per device call).

    python benchmarks/real_repos/fresh_table.py --out OUT [--names liger,fg,...]

Writes OUT/issue35-table.md. Per kernel: init's wall time (s) and exit code, the baseline's wall time (s),
one plain run of the benchmark (s: the shortest of the session's median baseline run `baseline.plain_run_s`
and init's runs `init.runs_s`: under CUPTI the baseline's runs are profiled runs and init's first run
compiles the kernels, so the shortest is the unit that leaves the target no slack; older json files
lack both, n/a), the baseline's wall as a multiple of that plain run, the tests the proposal's
[correctness] command keeps (the files or ids it names, its -k/-m selection, and the count init saw
pass) and those init dropped (its `# dropped:` lines: target and kind), the identical candidate's
verdict and code, and item 4's target: init + baseline <= 8 plain runs + one test run (the test run:
the identical candidate's correctness wall time, else the seconds init's own test run took). A kernel
without a json file is a row of n/a. Pure: reads the files, no kopt_mcp import.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path

#: issue 35 item 6's seven, in its order: Liger RMSNorm, LayerNorm, SwiGLU, CrossEntropy, fused linear
#: cross entropy; one FlagGems op (RMSNorm); one flash-linear-attention kernel (LayerNorm backward)
ISSUE35 = ("liger", "liger-layer-norm", "liger-swiglu", "liger-cross-entropy", "liger-flce", "fg", "fla-ln")
#: item 4's target: init + baseline within this many plain runs (and one test run)
TARGET_PLAIN_RUNS = 8
NA = "n/a"
SELECTORS = ("-k", "-m")  # pytest options whose value selects tests: kept in the "kept" cell
VALUED = ("-p", "--deselect", "--ignore", "-c", "--rootdir", "--timeout", "-n", "--maxfail")  # value not a test


def tests_kept(proposal: str) -> tuple[list[str], str | None]:
    """The [correctness] command's test files or ids (and -k/-m selections, as "-k EXPR"), and its
    command line; ([], None) when the proposal has none or is not TOML."""
    try:
        cmd = tomllib.loads(proposal).get("correctness", {}).get("command")
    except tomllib.TOMLDecodeError:
        return [], None
    if not cmd:
        return [], None
    try:
        words = shlex.split(cmd)
    except ValueError:
        return [], cmd
    if "pytest" in words:  # `python -m pytest ...`: its arguments (the -m of python is not a marker)
        words = words[words.index("pytest") + 1:]
    kept, skip = [], False
    for i, w in enumerate(words):
        if skip:
            skip = False
        elif w in SELECTORS and i + 1 < len(words):
            kept.append(f"{w} {words[i + 1]}")
            skip = True
        elif w in VALUED:
            skip = True
        elif not w.startswith("-") and ("test" in w and (w.endswith(".py") or "::" in w or "/" in w)):
            kept.append(w)
    return kept, cmd


def passed_count(tests_ran: list[str]) -> int | None:
    """"77 passed, 8 deselected ... (23.2 s); ..." -> 77 (init's own run of the correctness command)."""
    m = re.search(r"(\d+) passed", " ".join(tests_ran))
    return int(m.group(1)) if m else None


def init_test_s(tests_ran: list[str]) -> float | None:
    """The wall time init measured for its run of the correctness command: the "(23.2 s)" of its line, or
    "wall time without them: 25.3 s" where one wider run stood for it."""
    text = " ".join(tests_ran)
    m = re.search(r"wall time without them: (\d+(?:\.\d+)?) s", text) or re.search(r"\((\d+(?:\.\d+)?) s\)", text)
    return float(m.group(1)) if m else None


def dropped_cell(dropped: list[str]) -> str:
    """`# dropped:` lines ("target: kind: detail") -> "N: target (kind); ..."."""
    if not dropped:
        return "0"
    parts = [" (".join(d.split(": ", 2)[:2]) + ")" if d.count(": ") else d for d in dropped]
    return f"{len(dropped)}: " + "; ".join(parts)


def num(x: float | None, digits: int = 1) -> str:
    return NA if x is None else f"{x:.{digits}f}"


def row(name: str, doc: dict | None) -> dict:
    """One kernel's numbers from its fresh json (None: not run): a dict of the table's cells' values."""
    if doc is None:
        return {"name": name, "ran": False}
    init, base, ident = doc.get("init") or {}, doc.get("baseline") or {}, doc.get("identical") or {}
    kept, _ = tests_kept(init.get("proposal", ""))
    cost, corr = ident.get("cost") or {}, ident.get("correctness") or {}
    walls = [x for x in (base.get("plain_run_s") or cost.get("plain_run_s"), *init.get("runs_s", [])) if x]
    plain = min(walls) if walls else None
    test_s = corr.get("wall_s") or cost.get("test_s") or init_test_s(init.get("tests_ran", []))
    init_s, base_s = init.get("seconds"), base.get("seconds")
    spent = init_s + base_s if init_s is not None and base_s is not None else None
    budget = TARGET_PLAIN_RUNS * plain + (test_s or 0.0) if plain else None
    return {"name": name, "ran": True, "init_s": init_s, "init_exit": init.get("exit_code"),
            "resumed": bool(doc.get("resumed")), "baseline_s": base_s, "baseline_ok": base.get("ok"),
            "plain_s": plain, "baseline_x": round(base_s / plain, 1) if base_s is not None and plain else None,
            "kept": kept, "passed": passed_count(init.get("tests_ran", [])), "dropped": init.get("dropped", []),
            "verdict": ident.get("verdict"), "code": ident.get("code"), "test_s": test_s,
            "spent_s": spent, "budget_s": budget, "met": None if spent is None or budget is None else spent <= budget}


def cells(r: dict) -> list[str]:
    """One row's markdown cells (see HEADER)."""
    if not r["ran"]:
        return [r["name"]] + [NA] * (len(HEADER) - 1)
    kept = ", ".join(r["kept"]) or NA
    if r["passed"] is not None:
        kept += f" ({r['passed']} passed)"
    verdict = (f"{r['verdict']} ({r['code']})" if r["code"] else r["verdict"]) if r["verdict"] else NA
    target = (f"{num(r['spent_s'])} vs {num(r['budget_s'])}: " + ("met" if r["met"] else "not met")
              if r["met"] is not None else NA)
    base = num(r["baseline_s"]) + ("" if r["baseline_ok"] in (True, None) else " (failed)")
    return [r["name"], num(r["init_s"]), NA if r["init_exit"] is None else str(r["init_exit"]), base,
            num(r["plain_s"], 2), NA if r["baseline_x"] is None else f"{r['baseline_x']}x", kept,
            dropped_cell(r["dropped"]), verdict, target]


HEADER = ["kernel", "init wall (s)", "init exit", "baseline wall (s)", "one plain run (s)",
          "baseline / plain run", "tests kept", "tests dropped", "identical candidate", "init + baseline vs "
          f"{TARGET_PLAIN_RUNS} plain runs + one test run (s)"]


def table(rows: list[dict]) -> str:
    """The markdown table and a line on how many kernels met the target."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells(r)) + " |" for r in rows]
    ran = [r for r in rows if r["ran"]]
    based = sum(r["baseline_s"] is not None and r["baseline_ok"] in (True, None) for r in ran)
    ties = sum(r["verdict"] == "tie" for r in ran)
    met = sum(bool(r.get("met")) for r in ran)
    lines += ["", f"{len(ran)} of {len(rows)} kernels ran init; {based} reached a baseline; identical candidate "
              f"`tie` on {ties}; item 4's target "
              f"(init + baseline <= {TARGET_PLAIN_RUNS} plain runs + one test run) met on {met}."]
    return "\n".join(lines) + "\n"


#: a step label's first words name the step: the benchmark runs and test rounds are summed per kind
_KINDS = (("benchmark run", "benchmark runs"), ("the correctness tests", "correctness test rounds"),
          ("the correctness command", "correctness test rounds"), ("one profiled run", "the profiled run"))


def step_times(init: dict) -> dict[str, float]:
    """Init's wall time by kind of step (s), from its json's `steps` (init_fresh.py init_steps): benchmark
    runs, correctness test rounds, the profiled run, anything else by its label, and "not in a step" (init's
    wall less the steps: reading, probing the interpreter, choosing tests); {} where no steps were recorded."""
    steps = init.get("steps") or []
    if not steps:
        return {}
    out: dict[str, float] = {}
    for st in steps:
        kind = next((name for start, name in _KINDS if st["step"].startswith(start)), st["step"][:60])
        out[kind] = round(out.get(kind, 0.0) + st["s"], 1)
    if init.get("seconds") is not None:
        out["not in a step"] = round(init["seconds"] - sum(st["s"] for st in steps), 1)
    return out


def where_init_went(names: tuple[str, ...], docs: list[dict | None]) -> str:
    """A markdown list: per kernel, init's wall by kind of step (`step_times`); "" where none has steps."""
    lines = [f"- {n}: " + ", ".join(f"{k} {v:g} s" for k, v in t.items())
             for n, d in zip(names, docs) if d and (t := step_times(d.get("init") or {}))]
    return ("\n## Where init's time went (its own progress lines)\n\n" + "\n".join(lines) + "\n") if lines else ""


def load(out: Path, name: str) -> dict | None:
    f = out / f"{name}-fresh.json"
    return json.loads(f.read_text()) if f.is_file() else None


def write_table(out: Path, names: tuple[str, ...] = ISSUE35, dest: Path | None = None) -> Path:
    """DEST/issue35-table.md (DEST: OUT unless given) from OUT/<name>-fresh.json, one row per name; its path."""
    docs = [load(out, n) for n in names]
    rows = [row(n, d) for n, d in zip(names, docs)]
    head = ("# Issue 35 item 6: `kopt-mcp init --write` on fresh clones of seven real kernels\n\n"
            "From init_fresh.py's OUT/<name>-fresh.json (benchmarks/real_repos/fresh_table.py). The test run of "
            "the target: the identical candidate's correctness wall time, else init's own run's.\n\n")
    path = (dest or out) / "issue35-table.md"
    path.write_text(head + table(rows) + where_init_went(names, docs))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the folder holding <name>-fresh.json")
    ap.add_argument("--names", default=",".join(ISSUE35), help="comma-separated project names, in row order")
    a = ap.parse_args()
    print(write_table(a.out, tuple(n for n in a.names.split(",") if n)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
