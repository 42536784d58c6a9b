"""`kopt-mcp demo --agents 3`: three scripted agents at once on the CPU example, one candidate slot each.

Agent `a` is the main slot (`kopt-mcp serve`), `b` and `c` are `kopt-mcp serve --slot b|c`: three
server processes on one session and one BEST line, each driven over stdio by its own mcp client,
all in one event loop. The CPU is the device of all three (the example measures on the CPU, which
is not leased exclusively): each verdict compares BEST and the candidate in paired rounds under the
same load, so the planted effects (>= 38% per class, see the example's kopt.toml) still decide.

The scripts (AGENTS) run concurrently; `wait` names the events a step waits for (another agent's
keep or verdict), only where a patch is made against a tree another agent produces:

- a: vectorize (the example's 01 patch) -> improved, committed: BEST moves while b measures.
- b: a tuning note in a new file (no code changed) -> tie, judged against the BEST of that moment;
  after a's keep, the rename (03 patch, identical code) -> tie.
- c: after a's keep, the in-place version that writes into the caller's input (04) -> incorrect;
  its repair (05) -> improved; committed once b's rename was judged (so b's patch applies first).

At the end: every verdict as scripted, the BEST line `kernel-opt/demo` linear (no merges) with
exactly the baseline commit and the two keeps (a's, then c's) on the example's commit, best.json at its head, every slot following it,
and performance.md (on the line) with one keep row per class per kept commit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.markup import escape

from kopt_mcp.commands.demo import EXAMPLES, _data, prepare_repo
from kopt_mcp.paths import examples_dir

TAG = "demo"
NOTE = "# Tuning notes\n\nThe row max is subtracted before exp for range safety; keep it.\n"


@dataclass
class Step:
    """One scripted step: a patch of the example (`patch`) or a new file (`write`: path, text),
    then save_and_test on `target`; `expect` the verdict it must get; `commit`: commit_improvement
    (after the events in `commit_after`); `wait`: events to wait for first; `signal`: the event
    set once the step is done."""

    name: str
    expect: str
    patch: str | None = None
    write: tuple[str, str] | None = None
    commit: bool = False
    wait: tuple[str, ...] = ()
    commit_after: tuple[str, ...] = ()
    signal: str | None = None
    target: str = "global"


AGENTS: dict[str, list[Step]] = {
    "a": [Step("vectorize", "improved", patch="candidates/01-vectorize.patch", commit=True, signal="a-kept")],
    "b": [Step("tuning note", "tie", write=("TUNING.md", NOTE)),
          Step("rename", "tie", patch="candidates/03-subnoise.patch", wait=("a-kept",), signal="b-renamed")],
    "c": [Step("inplace", "incorrect", patch="candidates/04-inplace-buggy.patch", wait=("a-kept",)),
          Step("inplace-fix", "improved", patch="candidates/05-inplace-fix.patch", commit=True,
               commit_after=("b-renamed",), signal="c-kept")],
}
KEEPS = sum(s.commit for steps in AGENTS.values() for s in steps)
#: the BEST line above the example's commit, oldest first: the baseline's performance.md, then the
#: keeps in the order the scripts force (c commits only after a's keep)
KEPT_LINE = ["kopt: baseline", "a: vectorize", "c: inplace-fix"]


def server_params(repo: Path, slot: str | None) -> StdioServerParameters:
    """`kopt-mcp serve` on `repo` (tag demo), as candidate slot `slot` (None: the main slot)."""
    args = ["-m", "kopt_mcp.app.cli", "serve", "--repo", str(repo), "--tag", TAG] + (["--slot", slot] if slot else [])
    return StdioServerParameters(command=sys.executable, args=args, env={
        **os.environ, "PYTHONUNBUFFERED": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])})


@dataclass
class AgentsDemo:
    """Plays AGENTS against three stdio servers; `failures` lists every wrong verdict or check."""

    example: Path
    repo: Path
    out: Console
    failures: list[str] = field(default_factory=list)
    verdicts: list[tuple[str, str, str, str]] = field(default_factory=list)  # agent, step, got, expected
    events: dict[str, anyio.Event] = field(default_factory=dict)

    def _event(self, name: str) -> anyio.Event:
        return self.events.setdefault(name, anyio.Event())

    def say(self, agent: str, text: str) -> None:
        self.out.print(f"[bold]{agent}[/bold] {escape(text)}")

    async def run(self) -> bool:
        """Baseline on the main slot, then the three agents at once; then the consistency checks.
        True when every verdict and check is right."""
        for name in {e for steps in AGENTS.values() for s in steps for e in (*s.wait, *s.commit_after)}:
            self._event(name)
        async with Client(server_params(self.repo, None)) as main:
            base = _data(await main.call_tool("run_benchmark", {}, read_timeout_seconds=3600))
            shown = ", ".join(f"{c['key']} {c['metric']:.4g}" for c in base["classes"])
            self.say("a", f"baseline: {shown}")
            async with Client(server_params(self.repo, "b")) as b, Client(server_params(self.repo, "c")) as c:
                clients = {"a": main, "b": b, "c": c}
                with anyio.fail_after(1800):
                    async with anyio.create_task_group() as tg:
                        for agent, steps in AGENTS.items():
                            tg.start_soon(self._agent, agent, clients[agent], steps)
                st = {}
                for agent, cl in clients.items():  # each slot follows the final BEST before it answers
                    await cl.call_tool("find_idle_device", {})
                    st[agent] = _data(await cl.call_tool("status", {}))
                perf = (await main.read_resource("kopt://performance.md")).contents[0].text
        self._check(st, perf)
        return not self.failures

    async def _agent(self, agent: str, c: Client, steps: list[Step]) -> None:
        ws = Path(_data(await c.call_tool("status", {}))["workspace"])
        for i, step in enumerate(steps):
            for e in step.wait:
                await self.events[e].wait()
            if step.wait:
                await c.call_tool("find_idle_device", {})  # a cheap call: the slot follows the moved BEST first
            if not await self._step(agent, c, ws, step):
                # never leave another agent waiting for ever: this step's and every later step's signal
                for e in filter(None, (s.signal for s in steps[i:])):
                    self._event(e).set()
                return
            if step.signal:
                self._event(step.signal).set()

    async def _step(self, agent: str, c: Client, ws: Path, step: Step) -> bool:
        if step.patch:
            r = await anyio.run_process(["git", "apply", "--whitespace=nowarn", str(self.example / step.patch)],
                                        cwd=ws, check=False)
            if r.returncode != 0:
                self.failures.append(f"{agent} {step.name}: {step.patch} does not apply "
                                     f"({r.stderr.decode(errors='replace').strip()[:200]})")
                return False
        if step.write:
            (ws / step.write[0]).write_text(step.write[1])
        v = _data(await c.call_tool("save_and_test", {"target": step.target, "hypothesis": step.name},
                                    read_timeout_seconds=3600))
        self.verdicts.append((agent, step.name, v["verdict"], step.expect))
        mark = "as expected" if v["verdict"] == step.expect else f"EXPECTED {step.expect}"
        self.say(agent, f"{step.name}: {v['verdict']} ({mark}): {v['reason'][:160]}")
        if v["verdict"] != step.expect:
            self.failures.append(f"{agent} {step.name}: got {v['verdict']}, expected {step.expect}")
            return False
        if step.commit:
            for e in step.commit_after:
                await self.events[e].wait()
            cm = _data(await c.call_tool("commit_improvement", {"message": f"{agent}: {step.name}"},
                                         read_timeout_seconds=3600))
            self.say(agent, f"{step.name}: {'committed ' + cm['commit'][:12] if cm['committed'] else 'NOT kept'} "
                            f"({cm['reason'][:160]})")
            if not cm["committed"]:
                self.failures.append(f"{agent} {step.name}: commit_improvement refused: {cm['reason']}")
                return False
        return True

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.repo, capture_output=True, text=True, check=True).stdout

    def _check(self, st: dict[str, dict], perf: str) -> None:
        """One linear BEST line with exactly the scripted keeps, best.json and every slot at its
        head, performance.md on the line with one keep row per class per keep."""
        head = self._git("rev-parse", f"kernel-opt/{TAG}").strip()
        line = self._git("log", "--reverse", "--format=%s", f"main..kernel-opt/{TAG}").splitlines()
        merges = self._git("rev-list", "--merges", f"kernel-opt/{TAG}").split()
        if line != KEPT_LINE or merges:
            self.failures.append(f"BEST line: {line} with {len(merges)} merge(s) on the example's commit; "
                                 f"expected {KEPT_LINE}, no merge")
        common = Path(self._git("rev-parse", "--git-common-dir").strip())
        best = json.loads(((self.repo / common) / "kopt" / TAG / "best.json").read_text())["commit"]
        behind = {a: s["best_commit"] for a, s in st.items() if s["best_commit"] != head}
        if best != head or behind:
            self.failures.append(f"BEST not consistent: line {head[:12]}, best.json {best[:12]}, slots behind {behind}")
        n_classes = perf.count("| baseline |")
        on_line = self._git("show", f"kernel-opt/{TAG}:performance.md")
        if on_line != perf or n_classes == 0 or perf.count("| keep |") != KEEPS * n_classes:
            self.failures.append(f"performance.md: {perf.count('| keep |')} keep rows for {KEEPS} keeps x "
                                 f"{n_classes} classes (or it differs from the one on the BEST line)")
        self.out.rule("BEST line")
        self.out.print(escape(self._git("log", "--format=%h %s", f"kernel-opt/{TAG}")))
        self.out.rule("performance.md")
        self.out.print(escape(perf))


def run_agents_demo(agents: int = 3, keep: Path | None = None) -> int:
    """Run the three-agent demo on the CPU example; 0 when every verdict and check is right, 1
    otherwise. Raises ValueError for `agents` other than 3 (the scripts are written for three)."""
    if agents != len(AGENTS):
        raise ValueError(f"--agents {agents}: the multi-agent demo scripts {len(AGENTS)} agents; "
                         "use --agents 3 (or leave --agents out for the single-agent demo)")
    out = Console()
    src = examples_dir() / EXAMPLES["cpu"]
    base = keep or Path(tempfile.mkdtemp(prefix="kopt-demo-agents-"))
    repo = prepare_repo(src, base / src.name)
    out.print(f"[bold]kopt-mcp demo --agents {agents}[/bold]: example {src.name} (CPU), repository {repo}")
    demo = AgentsDemo(src, repo, out)
    try:
        passed = anyio.run(demo.run)
    except Exception as e:  # noqa: BLE001 -- a server or tool error is a failed demo, said plainly
        demo.failures.append(f"{type(e).__name__}: {e}")
        passed = False
    if passed:
        out.print(f"[bold green]demo passed[/bold green]: {len(demo.verdicts)} verdicts from {agents} agents as "
                  f"scripted, {KEEPS} keeps on one linear BEST line")
    else:
        out.print("[bold red]demo failed[/bold red]:\n  " + "\n  ".join(map(escape, demo.failures)))
    if keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if passed else 1
