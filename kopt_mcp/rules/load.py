"""Which paired rounds count, given the foreign load each run ran under (pure).

Evidence: per measured run a `RunLoad`, sampled from outside the benchmark by the referee's process
(kopt_mcp/gpus/load.py): on the CPU, the share of all cores' time that processes outside kopt-mcp's
own tree (the server, its runs and their children) used while the run lasted; on a GPU, the other
compute processes seen on the leased GPU and the utilization seen (the gate's probe).

Rule (`count_rounds`, thresholds from the Policy built from `[gates]`):

1. A run is under load when, on the CPU, other processes used `idle_cpu_pct` % of all cores or
   more (the gate's threshold; 100 turns it off), or with `exclusive_cpu` (a whole-machine gate, for
   multi-threaded kernels that use every core) EXCLUSIVE_CORE_PCT % of ONE core or more; on a GPU,
   when another compute process was on it. A benchmark measured using more than MULTI_CORE cores
   (`RunLoad.bench_cores`: threads, BLAS) leaves only the other cores free: under `idle_cpu_pct` its
   run is under load from the share of those free cores on (at least EXCLUSIVE_CORE_PCT % of one
   core), so a neighbour holding a whole core of a 2-core machine is load for it. A round (BEST's and the candidate's runs, in the
   profiled flow BEST after it too) is under load when one of its runs is. A run without figures
   (None: not sampled) is not under load.
2. A round under load is left out of the decision, and one round is measured in its place (`repeat`;
   a round measured in place of one that ran under load again is replaced too): code load_repeat.
   Rounds under load do not spend the `[gates] max_rounds` budget: the budget counts rounds without
   load, and at most LOAD_EXTRA_ROUNDS rounds more are measured in all (`can_measure_more`), so a
   clear effect is never a tie for lack of rounds that a neighbour's load took away (issue 34 item 4:
   an LLM agent's 4x win, +70..+84% in every clean round, was a tie when 2 of 4 rounds were left out).
3. The decision uses the other rounds where at least as many are left as a decision needs
   (Policy.decision_rounds: 2 for the script metric alone, 1 for a screen), with the whole budget while
   more rounds can be measured, else on the rounds it has (`counted_policy`; no keep ever rests on
   fewer rounds than without load): load_left_out, or load_clean where no round ran under load. A
   tie that stayed undecided with rounds left out says so (code tie_under_load): call again when
   the device is quieter.
4. Fewer rounds without load than that: where the gate is strict (`exclusive_cpu`, a GPU: it never
   measures beside another job) nothing is decided, the verdict is a tie (under_load); under
   `idle_cpu_pct`, whose gate measures anyway after `cpu_wait_s`, every round counts and the reason
   says they ran under load (load_counted_anyway): the paired rounds compare BEST and the candidate
   under the same load, and a keep still needs its rounds and its significance.

Why: on a 2-core machine one round under 43% foreign load moved an unchanged class by -29% and was
reported as a measured effect (issue 27); a multi-threaded candidate loses systematically when a
neighbour takes a core.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from kopt_mcp.evidence.load import ForeignProcess, RunLoad
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import Round, ScriptDecision, decide

#: rounds measured beyond the `[gates] max_rounds` budget in place of rounds under foreign load, at most
LOAD_EXTRA_ROUNDS = 3

#: `exclusive_cpu`: other processes together may use less than this % of ONE core (a quiet system's
#: own daemons); at or above it a run counts as under load and the gate waits
EXCLUSIVE_CORE_PCT = 25.0
#: a benchmark whose processes used more cores than this at their peak is multi-core (rule 1)
MULTI_CORE = 1.2


def cpu_limit_pct(idle_cpu_pct: float, exclusive_cpu: bool, cores: int,
                  bench_cores: float | None = None) -> float | None:
    """The share of all `cores` (%) at or above which other processes put a CPU run under load (and
    the CPU gate waits): EXCLUSIVE_CORE_PCT / cores with `[gates] exclusive_cpu`, else `[gates]
    idle_cpu_pct`, for a benchmark using more than MULTI_CORE cores (`bench_cores`) at most the cores
    it leaves free (at least EXCLUSIVE_CORE_PCT % of one core; module docstring, rule 1); None where
    neither applies (idle_cpu_pct >= 100 without exclusive_cpu: off)."""
    n = max(1, cores)
    if exclusive_cpu:
        return EXCLUSIVE_CORE_PCT / n
    if idle_cpu_pct >= 100:
        return None
    if bench_cores is not None and bench_cores > MULTI_CORE:
        free = max(EXCLUSIVE_CORE_PCT / 100.0, n - bench_cores)
        return min(idle_cpu_pct, round(100.0 * free / n, 1))
    return idle_cpu_pct


def under_load(load: RunLoad | None, policy: Policy, bench_cores: float | None = None) -> bool:
    """Whether one run ran under foreign load (module docstring, rule 1); `bench_cores`: the most cores
    the benchmark used in any run of the decision (a neighbour slows a multi-core run down to fewer
    cores: its own figure alone can hide its need). Never raises."""
    if load is None:
        return False
    if load.device == "gpu":
        return bool(load.processes)
    cores = max((c for c in (load.bench_cores, bench_cores) if c is not None), default=None)
    limit = cpu_limit_pct(policy.idle_cpu_pct, policy.exclusive_cpu, load.cores or 1, cores)
    return limit is not None and load.other_pct is not None and load.other_pct >= limit


def limit_shown(idle_cpu_pct: float, exclusive_cpu: bool, device: str = "cpu") -> str:
    """The threshold in words: '[gates] idle_cpu_pct = 50%', '[gates] exclusive_cpu (other processes
    under 25% of one core)', 'another compute process on the GPU'."""
    if device == "gpu":
        return "another compute process on the GPU"
    if exclusive_cpu:
        return f"[gates] exclusive_cpu (other processes under {EXCLUSIVE_CORE_PCT:g}% of one core)"
    return f"[gates] idle_cpu_pct = {idle_cpu_pct:g}%"


class RoundLoad(BaseModel):
    """One paired round's runs' loads, in run order (BEST, candidate; in the profiled flow the BEST
    run after it too); None for a run without figures."""

    runs: list[RunLoad | None]


class LoadRounds(BaseModel):
    """`count_rounds`' answer: rounds (0-based) under load, rounds the decision counts, whether to
    measure one more round in place of a loaded one (`repeat`), the code and the sentence saying so;
    `rounds` holds every round's figures (for the ledger)."""

    under_load: list[int]
    counted: list[int]
    repeat: bool
    code: Code
    reason: str
    rounds: list[RoundLoad] = Field(default_factory=list)

    @property
    def left_out(self) -> list[int]:
        """The rounds under load, left out of the decision."""
        return [i for i in range(len(self.rounds)) if i not in self.counted]


def _device(loads: list[RoundLoad]) -> str:
    return next((x.device for r in loads for x in r.runs if x is not None), "cpu")


def _peak(loads: list[RoundLoad]) -> float | None:
    """The most cores the benchmark used in any run of `loads` (None: not measured)."""
    return max((x.bench_cores for r in loads for x in r.runs if x is not None and x.bench_cores is not None),
               default=None)


def _loaded(loads: list[RoundLoad], policy: Policy) -> list[int]:
    """The rounds (0-based) with a run under foreign load, each judged by the peak cores of all (rule 1)."""
    peak = _peak(loads)
    return [i for i, r in enumerate(loads) if any(under_load(x, policy, peak) for x in r.runs)]


def _worst(r: RoundLoad, policy: Policy, peak: float | None = None) -> RunLoad | None:
    loaded = [x for x in r.runs if under_load(x, policy, peak)]
    if loaded:
        return max(loaded, key=lambda x: (x.other_pct or 0.0, len(x.processes)))
    return None


def _which(loads: list[RoundLoad], loaded: list[int], policy: Policy, peak: float | None) -> str:
    """The loaded rounds: the worst in full, with the processes it names, the others by their share
    ('round 3: other processes used 100% of 2 cores (pid 12 python 40%, ...); round 1: 88%, round 2:
    95%'); each round's processes are in the verdict's `load` field."""
    worst = {i: _worst(loads[i], policy, peak) for i in loaded}
    top = max(loaded, key=lambda i: worst[i].other_pct or 0.0)
    text = f"round {top + 1}: {worst[top].shown()}"
    rest = [f"round {i + 1}: {worst[i].share()}" for i in loaded if i != top]
    return text + (f"; {', '.join(rest)}" if rest else "")


def _sentence(loads: list[RoundLoad], loaded: list[int], code: Code, policy: Policy) -> str:
    seen = [x for r in loads for x in r.runs if x is not None]
    if not seen:
        return ""
    n, limit = len(loads), limit_shown(policy.idle_cpu_pct, policy.exclusive_cpu, _device(loads))
    peak, cores = _peak(loads), seen[0].cores or 1
    tight = cpu_limit_pct(policy.idle_cpu_pct, policy.exclusive_cpu, cores, peak)
    if peak is not None and peak > MULTI_CORE and not policy.exclusive_cpu and tight is not None:
        limit += f", {tight:g}% of {cores} cores for a benchmark using up to {peak:.1f} cores"
    if not loaded:
        cpu = [x.other_pct for x in seen if x.other_pct is not None]
        if not cpu:
            return "no round ran under foreign load (no other compute process on the GPU)"
        each = ", ".join(f"{max((x.other_pct or 0.0 for x in r.runs if x is not None), default=0.0):.0f}%"
                         for r in loads)  # every round's figure, loaded or not
        if cpu_limit_pct(policy.idle_cpu_pct, policy.exclusive_cpu, cores) is None:
            return (f"foreign load is not gated ([gates] idle_cpu_pct = 100): other processes used {each} of the "
                    "cores in the rounds, in order")
        return (f"no round ran under foreign load (other processes used {each} of the cores in the rounds, in "
                f"order, under {limit})")
    which = _which(loads, loaded, policy, peak)
    k, clean = len(loaded), n - len(loaded)
    if code == Code.LOAD_REPEAT:
        return f"round {loaded[-1] + 1} ran under foreign load at or above {limit} ({which}): measuring a round in its place"
    if code == Code.UNDER_LOAD:
        return (f"{k} of {n} paired rounds ran under foreign load at or above {limit} ({which}) and {clean} without "
                f"is too few to decide on (a decision needs {policy.decision_rounds}): not kept; measure again when "
                "the machine is quieter")
    if code == Code.LOAD_COUNTED_ANYWAY:
        return (f"{k} of {n} paired rounds ran under foreign load at or above {limit} ({which}); with {clean} "
                f"without, too few to decide on, all {n} were counted, as the CPU gate measures anyway: BEST and "
                "the candidate ran under the same load, round by round")
    return (f"{k} of {n} paired rounds ran under foreign load at or above {limit} ({which}) and "
            f"{'was' if k == 1 else 'were'} left out of the decision")


def count_rounds(loads: list[RoundLoad], policy: Policy, can_measure: bool) -> LoadRounds:
    """Which rounds count (module docstring, rules 1-4). `loads`: every round so far, in order;
    `can_measure`: the [gates] max_rounds budget allows one more round. Never raises."""
    loaded = _loaded(loads, policy)
    owed = 0
    for i in range(len(loads)):
        owed -= 1 if owed > 0 else 0  # measured in place of a loaded round
        owed += 1 if i in loaded else 0  # under load itself: owes one more in its place
    clean = [i for i in range(len(loads)) if i not in loaded]
    repeat = owed > 0 and can_measure
    strict = policy.exclusive_cpu or _device(loads) == "gpu"
    if not loaded:
        code, counted = Code.LOAD_CLEAN, clean
    elif repeat:
        code, counted = Code.LOAD_REPEAT, clean
    elif len(clean) >= policy.decision_rounds:
        code, counted = Code.LOAD_LEFT_OUT, clean
    elif strict:
        code, counted = Code.UNDER_LOAD, []
    else:
        code, counted = Code.LOAD_COUNTED_ANYWAY, list(range(len(loads)))
    return LoadRounds(under_load=loaded, counted=counted, repeat=repeat, code=code, rounds=list(loads),
                      reason=_sentence(loads, loaded, code, policy))


def can_measure_more(loads: list[RoundLoad], policy: Policy, budget: int) -> bool:
    """Whether one more round may be measured (rule 2): fewer rounds without load than `budget` (the
    [gates] max_rounds budget in the caller's unit: script rounds, or candidate runs) and fewer rounds
    in all than `budget` + LOAD_EXTRA_ROUNDS. Never raises."""
    loaded = len(_loaded(loads, policy))
    return len(loads) - loaded < budget and len(loads) < budget + LOAD_EXTRA_ROUNDS


def counted_policy(policy: Policy, lr: LoadRounds, can_measure: bool = False) -> Policy:
    """`policy` for the counted rounds: while more rounds can be measured the decision keeps the whole
    budget (rounds left out spend none of it, rule 2); when none can, it asks for no more rounds than
    it counted (Policy.spent_rounds). The rounds a keep needs and its confidence stay as they are."""
    if can_measure or not lr.left_out:
        return policy
    return policy.model_copy(update={"spent_rounds": max(0, policy.script_rounds - len(lr.counted))})


def decide_counted(rounds: list[Round], loads: list[RoundLoad], target: str, higher_is_better: bool,
                   policy: Policy, history: list[list[dict[str, float]]] | None,
                   can_measure: bool, record_history: list[list[dict[str, float]]] | None = None
                   ) -> tuple[ScriptDecision, LoadRounds]:
    """`script.decide` on the rounds that count (`count_rounds`), with the load sentence appended to
    its reason and `rounds_under_load` set. A pending repeat: needs_round (code load_repeat). Too few
    rounds without load under a strict gate: a tie (code under_load) whose classes still show what
    the rounds measured. `record_history`: as decide's. Raises VerdictError as decide."""
    lr = count_rounds(loads, policy, can_measure)
    counted = [rounds[i] for i in lr.counted]
    d = decide(counted or rounds, target, higher_is_better, counted_policy(policy, lr, can_measure), history,
               record_history=record_history)
    extra = {"rounds_under_load": len(lr.under_load)}
    if lr.repeat:
        return d.model_copy(update={"outcome": "tie", "needs_round": True, "code": Code.LOAD_REPEAT,
                                    "reason": lr.reason, "keep_interval": None, **extra}), lr
    if lr.code == Code.UNDER_LOAD:
        return d.model_copy(update={"outcome": "tie", "needs_round": False, "code": Code.UNDER_LOAD,
                                    "reason": f"{lr.reason} (the rounds said: {d.reason})", "keep_interval": None,
                                    "worse_classes": [], **extra}), lr
    reason = f"{d.reason}; {lr.reason}" if lr.reason else d.reason
    if d.outcome == "tie" and not d.needs_round and lr.left_out and d.code == Code.SCRIPT_NOT_CONFIRMED:
        return d.model_copy(update={"code": Code.TIE_UNDER_LOAD, "reason": (
            f"{reason}: undecided on the {len(lr.counted)} round(s) without load, with no more rounds allowed "
            "(LOAD_EXTRA_ROUNDS); call save_and_test again when the device is quieter"), **extra}), lr
    return d.model_copy(update={"reason": reason, **extra}), lr


__all__ = ["EXCLUSIVE_CORE_PCT", "LOAD_EXTRA_ROUNDS", "MULTI_CORE", "ForeignProcess", "LoadRounds", "RoundLoad", "RunLoad",
           "can_measure_more", "count_rounds",
           "counted_policy", "cpu_limit_pct", "decide_counted", "limit_shown", "under_load"]
