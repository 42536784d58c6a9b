"""`kopt-mcp demo`: the whole refereed loop on a bundled example, driven over stdio.

It copies the example kernel repository into a fresh git repository, starts `kopt-mcp serve` as a
subprocess, and plays the example's `scenario.toml` with the official mcp client the way an agent
following program.md would: baseline, warm-up, trace, then each candidate patch -> save_and_test ->
commit_improvement where the scenario says. It prints each verdict as it arrives and performance.md
at the end, and exits 0 only if every candidate got the verdict it should.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kopt_mcp.config import load_config
from kopt_mcp.ledger import Store
from kopt_mcp.paths import examples_dir
from kopt_mcp.views import charts

EXAMPLES = {"cpu": "cpu_softmax", "triton": "triton_softmax"}
NOT_IN_REPO = {"candidates", "scenario.toml", "check_candidates.py", "results", "__pycache__", ".kopt"}


def gpu_example_possible() -> bool:
    """True when torch, triton and an NVIDIA GPU are all present (checked in a subprocess)."""
    if not all(importlib.util.find_spec(m) for m in ("torch", "triton")):
        return False
    probe = "import torch,sys; sys.exit(0 if torch.cuda.is_available() and torch.version.cuda else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], timeout=120, capture_output=True).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def prepare_repo(example: Path, dest: Path) -> Path:
    """Copy the example (minus candidates and scenario) to `dest` and commit it as a git repo."""
    shutil.copytree(example, dest, ignore=lambda _d, names: [n for n in names if n in NOT_IN_REPO])
    ident = ["-c", "user.name=kopt-demo", "-c", "user.email=kopt-demo@localhost"]
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], [*ident, "commit", "-q", "-m", "example kernel"]):
        subprocess.run(["git", *cmd], cwd=dest, check=True)
    return dest


def kernel_line(k: dict) -> str:
    """One demo line for a kernel row of kernel_trace_analysis (a KernelRow as a dict): calls, total
    GPU time (us) and share (%), the median GPU time per launch (us) where the profiler recorded each
    launch, registers per thread. Raises KeyError if a KernelRow field is missing."""
    median = f", median {k['median_us']:.2f} us/launch" if k.get("median_us") is not None else ""
    return (f"  kernel {k['short_name']}: {k['calls']} calls, {k['total_us']:.1f} us ({k['share_pct']:.1f}%)"
            f"{median}, {k['registers_per_thread']} regs/thread")


def function_line(f: dict) -> str:
    """One demo line for a function of a CPU trace (a FunctionStat as a dict): where, self and total
    share of the samples (%). Raises KeyError if a field is missing."""
    return (f"  function {f['function']} ({f['file']}:{f['line']}): {f['self_pct']:.1f}% self, "
            f"{f['total_pct']:.1f}% with callees")


def _data(result) -> dict:
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise RuntimeError(text)
    return result.structured_content or json.loads(result.content[0].text)


class Demo:
    """Plays one scenario against a stdio server and records whether each verdict was right."""

    def __init__(self, example: Path, repo: Path, console: Console):
        self.example, self.repo, self.out = example, repo, console
        self.steps = tomllib.loads((example / "scenario.toml").read_text())["step"]
        self.failures: list[str] = []
        #: steps marked `may_tie` that came out `tie`: their effect was within this machine's noise
        self.ties: list[str] = []
        self.ws: Path | None = None  # the session's workspace, once status answered
        self.state_dir: Path | None = None  # the session's files (state, ledger, attempts), once status answered

    async def _call(self, c: Client, tool: str, args: dict | None = None) -> dict:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            self.out.print(f"    [dim]… {escape(message or '')}[/dim]")

        return _data(await c.call_tool(tool, args or {}, progress_callback=progress, read_timeout_seconds=3600))

    async def run(self) -> bool:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "kopt_mcp.app.cli", "serve", "--repo", str(self.repo), "--tag", "demo"],
            # the example's `python bench.py` must run on this interpreter (its numpy/torch/triton)
            env={**os.environ, "PYTHONUNBUFFERED": "1",
                 "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])})
        async with Client(params) as c:
            st = await self._call(c, "status")
            ws = self.ws = Path(st["workspace"])
            self.state_dir = Path(st["state_dir"])
            self.out.print(f"[bold]workspace[/bold] {ws} (branch {st['branch']})")
            self.out.print(f"[bold]session files[/bold] {self.state_dir} (state, ledger, attempts, run logs)")
            base = await self._call(c, "run_benchmark")
            self._table("baseline (BEST_COMMIT)", base["metric"], base["classes"])
            warm = await self._call(c, "warm_up_harness")
            self.out.print(f"warm-up: cold {warm['cold_s']:.2f} s, warm {warm['warm_s']:.2f} s")
            trace = await self._call(c, "kernel_trace_analysis", {"top": 5})
            if trace["available"]:
                for k in trace["kernels"]:
                    self.out.print(escape(kernel_line(k)))
                for f in (trace.get("cpu") or {}).get("functions", []):  # the CPU: py-spy's hottest functions
                    self.out.print(escape(function_line(f)))
            else:
                self.out.print(f"trace: {escape('; '.join(trace['notes']))}")
            for i, step in enumerate(self.steps, 1):
                if not await self._step(c, ws, i, step):
                    break
            perf = await c.read_resource("kopt://performance.md")
            self.out.rule("performance.md")
            sys.stdout.write(perf.contents[0].text)
            sys.stdout.flush()
        return not self.failures

    async def _step(self, c: Client, ws: Path, i: int, step: dict) -> bool:
        """Play one step; False when the scenario cannot go on (its patch does not apply to the tree
        the earlier steps left, e.g. after an earlier step missed its verdict)."""
        name, expect = step["name"], step["expect"]
        self.out.rule(f"step {i}: {name}")
        if step.get("patch"):
            r = subprocess.run(["git", "apply", "--whitespace=nowarn", str(self.example / step["patch"])], cwd=ws,
                               capture_output=True, text=True, check=False)
            if r.returncode != 0:
                self.failures.append(f"step {i} {name}: {step['patch']} does not apply to the tree the earlier "
                                     f"steps left ({r.stderr.strip()[:200]}); the scenario stops here")
                self.out.print(f"  [red]{escape(self.failures[-1])}[/red]")
                return False
        v = await self._call(c, "save_and_test", {"target": step.get("target", "global"),
                                                  "hypothesis": step.get("hypothesis", name)})
        ok = v["verdict"] == expect
        # a moderate timing effect (step `may_tie`): on a noisy machine the rules may not resolve it, and a
        # tie (nothing kept, nothing counted as a regression) is the safe side, never a wrong keep
        tied = not ok and bool(step.get("may_tie")) and v["verdict"] == "tie"
        mark = ("[green]as expected[/green]" if ok else
                f"[yellow]expected {expect}; within this machine's noise: a tie keeps nothing[/yellow]" if tied else
                f"[red]expected {expect}[/red]")
        how = f" on {v['metric_used']}, {v['rounds']} round(s)" if v["rounds"] else ""
        self.out.print(f"  verdict [bold]{v['verdict']}[/bold] ({mark}){how}: {escape(v['reason'])}")
        for cl in v["classes"]:
            self.out.print(f"    {cl['key']}: {cl['best']:.4g} -> {cl['candidate']:.4g} "
                           f"({', '.join(f'{d:+.2f}%' for d in cl['deltas_pct'])})")
        if v.get("gpu_delta_pct") is not None:
            self.out.print(f"    GPU time {v['gpu_best_us']:.1f} -> {v['gpu_candidate_us']:.1f} us "
                           f"({v['gpu_delta_pct']:+.2f}%)")
        if tied:
            self.ties.append(f"step {i} {name}: tie, expected {expect}")
        elif not ok:
            self.failures.append(f"step {i} {name}: got {v['verdict']}, expected {expect}")
        if step.get("then") == "commit" and v["verdict"] == "improved":
            cm = await self._call(c, "commit_improvement", {"message": name})
            self.out.print(f"  commit: {'committed ' + cm['commit'][:12] if cm['committed'] else 'NOT kept'}"
                           f" ({escape(cm['reason'])})")
            if not cm["committed"]:
                self.failures.append(f"step {i} {name}: commit_improvement refused: {cm['reason']}")
        return True

    def _table(self, title: str, metric: str, classes: list[dict]) -> None:
        t = Table(title=title)
        t.add_column("config class")
        t.add_column(metric, justify="right")
        t.add_column("correct")
        for cl in classes:
            t.add_row(cl["key"], f"{cl['metric']:.4g}", "yes" if cl["correct"] else "NO")
        self.out.print(t)


def write_charts(state_dir: Path, config: Path, out_dir: Path) -> list[Path]:
    """Draw progress.png and last_verdict.png from the ledger of the session whose state folder is
    `state_dir` (status' `state_dir`) into `out_dir`; their paths."""
    cfg, events = load_config(config).target, Store(state_dir).ledger()
    out_dir.mkdir(parents=True, exist_ok=True)
    progress, last = out_dir / "progress.png", out_dir / "last_verdict.png"
    progress.write_bytes(charts.progress_chart(events, cfg.benchmark.metric, cfg.benchmark.higher_is_better))
    last.write_bytes(charts.last_verdict_chart(events, cfg.gates.noise_pct))
    return [progress, last]


def _charts(out: Console, state_dir: Path, config: Path, out_dir: Path | None) -> None:
    """Write the charts (into the current directory when the demo folder is temporary) and say where."""
    target = out_dir or Path.cwd() / "kopt-demo-charts"
    try:
        paths = write_charts(state_dir, config, target)
    except Exception as e:  # noqa: BLE001 -- the charts are a view of the ledger: never fail the demo over them
        out.print(f"[yellow]charts not written[/yellow]: {escape(str(e))}")
        return
    out.rule("charts")
    for p in paths:
        out.print(f"chart: {escape(str(p))}", soft_wrap=True)
    if out_dir is None:
        out.print("(the demo's temporary folder is deleted at exit, so the charts went to ./kopt-demo-charts/ "
                  "in the current directory; pass --keep DIR to keep everything together)")


def run_demo(example: str = "auto", keep: Path | None = None) -> int:
    """Run the demo; returns 0 if every candidate got its expected verdict (a step marked `may_tie` in
    scenario.toml may come out `tie` instead: its effect is moderate, and on a noisy machine the rules
    may not resolve it), 1 otherwise."""
    out = Console()
    kind = example if example != "auto" else ("triton" if gpu_example_possible() else "cpu")
    src = examples_dir() / EXAMPLES[kind]
    out.print(f"[bold]kopt-mcp demo[/bold]: example {src.name} ({'NVIDIA GPU' if kind == 'triton' else 'CPU'})")
    base = keep or Path(tempfile.mkdtemp(prefix="kopt-demo-"))
    repo = prepare_repo(src, base / src.name)
    out.print(f"kernel repository: {repo}")
    demo = Demo(src, repo, out)
    passed = anyio.run(demo.run)
    if demo.state_dir is not None:
        _charts(out, demo.state_dir, repo / "kopt.toml", base / "charts" if keep is not None else None)
    if passed and demo.ties:
        out.print(f"[bold green]demo passed[/bold green]: {len(demo.steps) - len(demo.ties)} of {len(demo.steps)} "
                  f"candidates got the verdict they should; {len(demo.ties)} with a moderate effect came out tie on "
                  "this machine's noise (nothing kept: the safe side):\n  " + "\n  ".join(demo.ties))
    elif passed:
        out.print(f"[bold green]demo passed[/bold green]: all {len(demo.steps)} candidates got the verdict they should")
    else:
        out.print("[bold red]demo failed[/bold red]:\n  " + "\n  ".join(demo.failures))
    if keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if passed else 1
