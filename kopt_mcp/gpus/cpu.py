"""The CPU device's foreign load: how much of the cores processes outside kopt-mcp's own tree use.

On a host without a GPU the CPU is the device, and a neighbour's job on the cores moves the
script metric as surely as a neighbour's kernel moves GPU time. Two readers share one accounting:
`CpuLoadProbe.read` (the gate: two readings `interval_s` apart, before a lease) and
`kopt_mcp.gpus.load.CpuLoadSampler` (every measured run: readings from its start to its end).

Accounting between two readings (psutil; `read_cpu`):

- machine busy time: all cores' time but idle and iowait (psutil.cpu_times);
- own time: the CPU time of kopt-mcp's own tree, the server (`roots`, this process) and every
  descendant (its runs and their children), each with the time of its finished children
  (user + system + children_user + children_system): a run that starts and ends between two
  readings is still counted as own, through its parent's children time; a run that ends while the
  process table is being read counts once (`_runs_seconds`: the own tree is read again after the
  table, this process before and after its runs). The server's own
  launchers (ancestors whose command line runs kopt-mcp, e.g. `uv run kopt-mcp`) count as own;
- other = busy - own, as % of all cores' time, clipped to 0..100. Each other process is named with
  its OWN CPU time (user + system) over the interval, a process that started inside the interval
  counted whole: never its children's, so a shell that only waited for the processes it ran is not
  blamed for them. The time of another process's children that ended between two readings (its
  children_user + children_system increase, less what those children had used before the first
  reading) is listed apart, as "(ended children of <name>)" under the parent's pid. The rest of
  `other` that no process accounts for (processes whose parent is gone too, the kernel's own work, a
  VM's steal time) is `unattributed_pct`: the parts add up to the figure.
- the benchmark's cores: the CPU seconds of the own tree's runs (every own process but this one and
  its launchers, and this process's finished children) per wall second (`CpuReading.bench_s`;
  kopt_mcp.gpus.load keeps the peak over a run).

The gate (`kopt_mcp.gpus.gate.GpuGate`) waits while `other_pct` is at or above `[gates]
idle_cpu_pct` (or, with `[gates] exclusive_cpu`, a quarter of one core: rules/load.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
from pydantic import BaseModel

from kopt_mcp.evidence.load import ForeignProcess, RunLoad

__all__ = ["CpuLoad", "CpuLoadProbe", "CpuProcessLoad", "CpuReading", "cpu_load_between", "own_tree", "read_cpu"]

#: processes named in a load figure; the rest are summed into `rest_pct`
TOP = 5
#: a process using less than this share of all cores (%) is not named, only counted in `rest_pct`
MIN_NAMED_PCT = 0.5
#: an ancestor of the server with a command-line word (its file name) starting so is one of kopt-mcp's own
#: launchers: `uv run kopt-mcp`, `python -m kopt_mcp`, `/venv/bin/kopt-mcp serve`
LAUNCHER_WORDS = ("kopt-mcp", "kopt_mcp")


class CpuProcessLoad(BaseModel):
    """One other process's CPU use over the sample: `pct` in % of ONE core (200 = two cores busy),
    `share_pct` in % of ALL cores (the unit of `CpuLoad.other_pct`: the shares add up to it)."""

    pid: int
    name: str
    pct: float
    share_pct: float = 0.0


class CpuLoad(BaseModel):
    """One sample: `other_pct` = % of ALL cores' time used by processes outside the own tree
    (0..100), over `interval_s` seconds on `cores` logical cores; `top` = the busiest of them,
    `rest_pct` (% of all cores) the other `rest_processes` ones, `unattributed_pct` what no process
    accounts for: top + rest + unattributed = other_pct."""

    cores: int
    interval_s: float
    other_pct: float
    own_pct: float
    top: list[CpuProcessLoad] = []
    rest_pct: float = 0.0
    rest_processes: int = 0
    unattributed_pct: float = 0.0

    def shown(self) -> str:
        """'other processes used 56% of 2 cores (pid 12 python 40%, pid 13 stress 12%, 2 more
        processes 1%, 3% not attributed to a process)': shares of all cores that add up
        (evidence.load.RunLoad.shown)."""
        return self.as_run_load().shown()

    def as_run_load(self, samples: int = 2) -> RunLoad:
        """The same figures as the evidence type of rules/load.py."""
        return RunLoad(device="cpu", duration_s=self.interval_s, samples=samples, other_pct=self.other_pct,
                       cores=self.cores, unattributed_pct=self.unattributed_pct,
                       processes=[ForeignProcess(pid=p.pid, name=p.name, pct=p.share_pct) for p in self.top],
                       rest_processes=self.rest_processes, rest_pct=self.rest_pct)


def _launchers() -> set[int]:
    """This process's ancestors that run kopt-mcp (a `uv run kopt-mcp` wrapper, a supervisor)."""
    out = set()
    try:
        for p in psutil.Process().parents():
            try:
                if any(os.path.basename(a).startswith(LAUNCHER_WORDS) for a in p.cmdline()):
                    out.add(p.pid)
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return out


def own_tree(roots: frozenset[int]) -> set[int]:
    """The pids of `roots` and all their descendants still alive."""
    out = set()
    for pid in roots:
        try:
            p = psutil.Process(pid)
            out.add(pid)
            out.update(c.pid for c in p.children(recursive=True))
        except psutil.Error:
            pass
    return out


def _busy_s(t) -> float:
    """Busy seconds of a psutil.cpu_times() reading: all but idle and iowait (guest time is already
    inside user on Linux)."""
    idle = t.idle + getattr(t, "iowait", 0.0)
    total = sum(getattr(t, f) for f in t._fields if f not in ("guest", "guest_nice"))
    return total - idle


@dataclass
class CpuReading:
    """One reading of the machine: `t` (monotonic s), `wall` (epoch s), `busy_s` (all cores' busy
    seconds so far), `own_s` (the own tree's CPU seconds so far, finished children included),
    `bench_s` (the part of own_s that the runs used: not this process's own time nor its launchers')
    and every other process: pid -> (name, create time epoch s, its own CPU seconds, parent pid, its
    finished children's CPU seconds); `own`: the pids that counted as own."""

    t: float
    wall: float
    busy_s: float
    own_s: float
    others: dict[int, tuple[str, float, float, int | None, float]] = field(default_factory=dict)
    own: set[int] = field(default_factory=set)
    bench_s: float = 0.0


def read_cpu(roots: frozenset[int] = frozenset()) -> CpuReading:
    """Read the machine once (module docstring). Own: `roots`, this process and every descendant of
    those in this reading's process table, and kopt-mcp launchers among this process's ancestors
    (themselves only). Never raises for processes that end while being read."""
    procs = {}
    for p in psutil.process_iter(["name", "cpu_times", "create_time", "ppid"]):
        ct = p.info.get("cpu_times")
        if ct is not None:
            procs[p.pid] = (p.info.get("name") or "?", p.info.get("create_time") or 0.0, p.info.get("ppid"), ct)
    t, wall, busy = time.monotonic(), time.time(), _busy_s(psutil.cpu_times())
    kids: dict[int, list[int]] = {}
    for pid, (_, _, ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    tree, stack = set(), [*roots, os.getpid()]
    while stack:
        pid = stack.pop()
        if pid not in tree:
            tree.add(pid)
            stack.extend(kids.get(pid, ()))
    launchers = _launchers()
    own = tree | launchers  # a launcher itself, not its other children
    runs = {pid: procs[pid][1] for pid in tree if pid in procs and pid != os.getpid() and pid not in launchers}
    me_s, bench_s = _runs_seconds(runs)
    own_s = me_s + bench_s + sum(_with_children(procs[pid][3]) for pid in launchers if pid in procs)
    others = {pid: (name, created, ct.user + ct.system, ppid, _children_s(ct))
              for pid, (name, created, ppid, ct) in procs.items() if pid not in own}
    return CpuReading(t=t, wall=wall, busy_s=busy, own_s=own_s, others=others, own=own, bench_s=bench_s)


#: times the own tree is read again when one of its runs was reaped while it was being read
OWN_READ_TRIES = 3


def _runs_seconds(runs: dict[int, float]) -> tuple[float, float]:
    """(this process's own CPU s, the runs' CPU s), read after the scan of the process table:
    `runs` (pid -> create time, epoch s) each with its finished children, plus this process's
    finished children. This process is read before and after the runs, and again while a run was
    reaped in between, so a run this process reaped during a reading counts once: in its entry or
    in this process's finished children, never in both nor in neither. A run's own child that the
    run reaps during the pass can still count 0 or 2 times; the pass takes milliseconds, where the
    scan before it can take seconds. A pid now held by another process (another create time) is
    not read."""
    me = psutil.Process()
    for _ in range(OWN_READ_TRIES):
        before = me.cpu_times()
        runs_s = 0.0
        for pid, created in runs.items():
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - created) < 0.01:
                    runs_s += _with_children(p.cpu_times())
            except psutil.Error:
                continue  # ended: reaped, its time is in its parent's finished children
        after = me.cpu_times()
        if _children_s(after) == _children_s(before):
            break
    return after.user + after.system, runs_s + _children_s(after)


def _children_s(ct) -> float:
    """A process's finished (reaped) children's CPU seconds."""
    return getattr(ct, "children_user", 0.0) + getattr(ct, "children_system", 0.0)


def _with_children(ct) -> float:
    """A process's CPU seconds with those of its finished (reaped) children."""
    return ct.user + ct.system + getattr(ct, "children_user", 0.0) + getattr(ct, "children_system", 0.0)


#: the name of the entry that holds a process's children that ended between two readings
ENDED_CHILDREN = "(ended children of {name})"


def process_seconds(a: CpuReading, b: CpuReading) -> dict[int, tuple[str, float]]:
    """Each other process's own CPU seconds between readings `a` and `b`: pid -> (name, s). A process
    seen in both (same create time) counts its increase; one created after `a` counts whole; never
    its children's time. The children of a process seen in both that ended in between (its finished
    children's time increase, less what those seen at `a` had used by then) are one more entry,
    keyed by minus the parent's pid, named ENDED_CHILDREN (module docstring)."""
    def same(pid: int | None, x: CpuReading = a, y: CpuReading = b) -> bool:
        p, q = x.others.get(pid), y.others.get(pid)
        return p is not None and q is not None and abs(p[1] - q[1]) < 0.01

    out: dict[int, list] = {}
    for pid, (name, created, s, _, kids) in b.others.items():
        if same(pid):
            out[pid] = [name, s - a.others[pid][2]]
            ended = kids - a.others[pid][4]
            if ended > 0:
                out[-pid] = [ENDED_CHILDREN.format(name=name), ended]
        elif created >= a.wall - 0.01:
            out[pid] = [name, s]
            if kids > 0:
                out[-pid] = [ENDED_CHILDREN.format(name=name), kids]
    for pid, (_, _, s, ppid, kids) in a.others.items():
        if not same(pid) and same(ppid) and -ppid in out:  # ended in between: its time before `a` is not
            out[-ppid][1] -= s + kids                       # the interval's
    return {pid: (name, max(0.0, v)) for pid, (name, v) in out.items()}


def cpu_load_between(a: CpuReading, b: CpuReading, used: dict[int, tuple[str, float]] | None = None,
                     top: int = TOP) -> CpuLoad:
    """The load between readings `a` and `b` (module docstring); `used`: each other process's CPU
    seconds over the interval (default `process_seconds(a, b)`; the sampler sums its readings')."""
    cores = psutil.cpu_count() or 1
    wall = max(b.t - a.t, 1e-6)
    used = process_seconds(a, b) if used is None else used
    total = wall * cores

    def share(s: float) -> float:
        return s / total * 100.0

    ranked = sorted(((pid, name, s) for pid, (name, s) in used.items() if s > 0), key=lambda x: -x[2])
    attributed = share(sum(s for _, _, s in ranked))
    if attributed > 100.0:  # readings of the process table are not instantaneous: never more than all cores
        ranked = [(pid, name, s * 100.0 / attributed) for pid, name, s in ranked]
        attributed = 100.0
    other = min(100.0, max(share(max(0.0, b.busy_s - a.busy_s - (b.own_s - a.own_s))), attributed))
    named = [x for x in ranked[:top] if share(x[2]) >= MIN_NAMED_PCT]  # the rest are summed
    shown, rest = named, ranked[len(named):]
    return CpuLoad(cores=cores, interval_s=round(wall, 3), other_pct=round(other, 1),
                   own_pct=round(min(100.0, share(max(0.0, b.own_s - a.own_s))), 1),
                   top=[CpuProcessLoad(pid=abs(pid), name=name, pct=round(s / wall * 100.0, 1),
                                       share_pct=round(share(s), 1)) for pid, name, s in shown],
                   rest_pct=round(share(sum(s for _, _, s in rest)), 1), rest_processes=len(rest),
                   unattributed_pct=round(max(0.0, other - attributed), 1))


class CpuLoadProbe:
    """Reads other processes' load on the cores (module docstring). `interval_s`: the sample's
    length (s); `sleep` injectable; `top`: processes named. Raises ValueError for interval_s <= 0."""

    name = "cpu-load"

    def __init__(self, interval_s: float = 1.0, sleep: Callable[[float], None] = time.sleep, top: int = TOP) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self._sleep = sleep
        self._top = top

    def read(self, own_pids: frozenset[int] = frozenset()) -> CpuLoad:
        """One sample. Processes in the tree of this process and of `own_pids` count as own (module
        docstring): other_pct = (machine busy time - own tree's time) / (interval x cores) x 100,
        clipped to 0..100, never below what the listed processes used. Never raises for processes
        that end while being read."""
        a = read_cpu(frozenset(own_pids))
        self._sleep(self.interval_s)
        return cpu_load_between(a, read_cpu(frozenset(own_pids)), top=self._top)
