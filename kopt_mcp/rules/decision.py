"""The one verdict vocabulary and the stable reason codes every rule returns (pure).

A rule returns a decision with an `outcome` (what happens), a `code` (why, from `Code`: stable, for
agents, tests, the ledger and the report to branch on) and a `reason` (the same in words, with the
numbers; free to be reworded). Tests assert codes and numbers, never the reason's prose.

Vocabularies:

| name | values | where |
|---|---|---|
| `Verdict` | what `save_and_test` / `commit_improvement` rule on an attempt | VerdictResult, SessionState |
| `AttemptVerdict` | `Verdict` plus ledger-only ends: `interrupted`, `cancelled` | ledger `attempt` records |
| `MeasuredOutcome` | what a measured comparison concludes | the script metric, the GPU time |
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args

from pydantic import BaseModel, Field

Verdict = Literal["improved", "tie", "regressed", "divergent", "incorrect", "abandoned", "failed", "rejected",
                  "conflict"]
AttemptVerdict = Literal[get_args(Verdict) + ("interrupted", "cancelled")]  # type: ignore[valid-type]
MeasuredOutcome = Literal["improved", "tie", "regressed", "divergent"]


class Code(StrEnum):
    """Why a decision came out as it did. Stable: add codes, never rename one (agents branch on them)."""

    # the script metric (rules/verdict.py)
    SCRIPT_WIN = "script_win"                      # a clear win, significant and confirmed
    SCRIPT_SUB_NOISE_WIN = "script_sub_noise_win"  # under the noise threshold, confirmed in a row, significant
    SCRIPT_SCREEN_PASSED = "script_screen_passed"  # faster in the last run: the GPU time confirms or not
    SCRIPT_NOISE = "script_noise"                  # within the noise threshold, not confirmed
    SCRIPT_NOT_CONFIRMED = "script_not_confirmed"  # a change not significant or not confirmed within the budget
    SCRIPT_REGRESSION = "script_regression"        # slower beyond the noise threshold, confirmed, significant
    SCRIPT_DIVERGENT = "script_divergent"          # target better, another class reproducibly worse
    SCRIPT_WORSE_CLASS = "script_worse_class"      # target better, another class significantly worse: not kept
    SCRIPT_WITHIN_RECORD = "script_within_best_record"  # a win in the paired rounds that BEST's own runs of the
                                                   # session reach (rules/best_record.py): not kept
    NEEDS_ROUND = "needs_round"                    # undecided: measure one more round
    # the keep metric: profiler GPU time (rules/keep.py, rules/verdict.py apply_keep_metric)
    GPU_TIME_WIN = "gpu_time_win"                  # the target kernels' GPU time improved beyond the floor
    GPU_TIME_BELOW_FLOOR = "gpu_time_below_floor"  # moved the right way, not beyond BEST's own spread
    GPU_TIME_NOT_IMPROVED = "gpu_time_not_improved"  # the script metric improved, the GPU time did not
    GPU_TIME_LOSS = "gpu_time_loss"                # significantly slower beyond the floor
    GPU_TIME_MISSING = "gpu_time_missing"          # a profile failed or lacks the target / per-launch times
    GPU_TIME_UNREPRODUCIBLE = "gpu_time_unreproducible"  # BEST's own profiles launched different work
    SKIPPED_WORK = "skipped_work"                  # fewer launches than the fixed benchmark makes
    REPLAYED_RESULT = "replayed_result"            # target absent from timed invocations where BEST ran it (copies
                                                   # of a cached result, or a few calls skipped): rules/replay.py
    PERSISTING_L2 = "persisting_l2"                # the candidate set an L2 access policy window or persisting-L2
                                                   # limit: the harness's L2 flush no longer evicts (rules/hacks.py)
    BEYOND_SPEED_OF_LIGHT = "beyond_speed_of_light"  # ncu: DRAM bandwidth over the device's peak (rules/light.py)
    TOO_FEW_BYTES = "too_few_bytes"                # ncu: far fewer DRAM bytes than BEST's for the same unit
    OTHER_KERNEL_GREW = "other_kernel_grew"        # the operation got slower: another kernel of the timed call grew
    GPU_TIME_DIVERGENT = "gpu_time_divergent"      # faster overall, one config class significantly slower
    OPERATION_DIVERGENT = "operation_divergent"    # target kernels faster, the whole operation of some class slower
    COMPILED_CODE_UNCHANGED = "compiled_code_unchanged"  # target kernels compiled and launched as BEST's
    PROFILER_LOST = "profiler_lost"                # the session's keep metric is GPU time, no profiler now
    SCRIPT_ONLY = "script_only"                    # no profiler on this device: the script metric decided
    # gates before and around the measurement (referee/)
    INCORRECT = "incorrect"                        # the correctness gate failed (older ledgers; now rows_incorrect,
                                                   # check_failed)
    ABANDONED = "abandoned"                        # still incorrect after the last repair
    RUN_FAILED = "run_failed"                      # a profiled run left nothing to read (older ledgers: any failed
                                                   # run; now the gate's codes below)
    # the correctness gate of one run (rules/correctness.py), also the code of the verdict it ends
    RUN_OK = "run_ok"                              # exit 0, fresh results, every row correct
    RUN_TIMED_OUT = "run_timed_out"                # ran past [benchmark] timeout_s: killed with its process tree
    RUN_CRASHED = "run_crashed"                    # exited with a code other than 0
    RESULTS_MISSING = "results_missing"            # the run wrote no result file (or log) where the config says
    RESULTS_STALE = "results_stale"                # every result file predates the run (left from an earlier one)
    RESULTS_UNUSABLE = "results_unusable"          # the results are there but cannot be read as configured
    ROWS_INCORRECT = "rows_incorrect"              # the correctness rule failed on rows of some config classes
    CHECK_FAILED = "check_failed"                  # the [correctness] command failed or timed out
    PROTECTED_PATH = "protected_path"              # the diff touches a protected file
    UNSAFE_SYMLINK = "unsafe_symlink"              # a symlink into a protected path or out of the repository
    SHADOWING = "shadowing"                        # a new file shadows a module the benchmark imports
    TAMPERED = "tampered"                          # a run rewrote a protected file or the workspace
    NO_DEVICE = "no_device"                        # no idle device for the whole wait
    DEVICE_LOST = "device_lost"                    # the device went away twice in one call
    BAD_TARGET = "bad_target"                      # the target or the classes do not fit the runs
    # the commit gate (rules/commit.py) and the out-of-process confirmation (rules/confirm.py)
    STILL_BETTER = "still_better"                  # the commit's re-measure still favours the candidate
    VERDICT_STANDS = "verdict_stands"              # the verdict's GPU-time bounds are tight: no re-measure, confirmed out of process
    NO_LONGER_BETTER = "no_longer_better"          # the re-measure no longer shows the win, or a class got worse
    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    UNCONFIRMED = "unconfirmed"                    # no out-of-process profiler applies here
    CONFLICT = "conflict"                          # re-applying onto a newer BEST overlapped
    # a neutral keep: a `tie` kept by name (rules/commit.py neutral_keep), never a gain
    NEUTRAL_KEPT = "neutral_kept"                  # the tie committed as neutral
    NEUTRAL_REFUSED_NO_REASON = "neutral_refused_no_reason"  # no reason given by name
    NEUTRAL_REFUSED_NOT_TIE = "neutral_refused_not_tie"      # the latest verdict is no tie
    NEUTRAL_REFUSED_BEST_MOVED = "neutral_refused_best_moved"  # BEST_COMMIT moved since the tie was judged
    NEUTRAL_REFUSED_WORSE_CLASS = "neutral_refused_worse_class"  # a class (or the target) worse beyond noise
    # ledger-only ends of an attempt (AttemptVerdict)
    INTERRUPTED = "interrupted"                    # the server stopped mid-attempt: recovery archived it
    CANCELLED = "cancelled"                        # the client cancelled the call: the tree stays as it was
    # foreign load during the rounds (rules/load.py)
    LOAD_CLEAN = "load_clean"                      # no round ran under foreign load
    LOAD_REPEAT = "load_repeat"                    # a round ran under foreign load: one more in its place
    LOAD_LEFT_OUT = "load_left_out"                # rounds under foreign load were left out of the decision
    LOAD_COUNTED_ANYWAY = "load_counted_anyway"    # too few rounds without load: all counted, as the CPU gate measures anyway
    UNDER_LOAD = "under_load"                      # every round ran under foreign load: not decided, not kept
    TIE_UNDER_LOAD = "tie_under_load"              # undecided on the rounds without load, no more allowed: call again


class Decision(BaseModel):
    """A rule's result: `outcome` (what happens), `code` (why, stable), `reason` (why, in words, with
    the numbers) and `numbers` (the figures the reason names: % and us)."""

    outcome: str
    code: Code
    reason: str
    numbers: dict[str, float | int | str | None] = Field(default_factory=dict)


__all__ = ["AttemptVerdict", "Code", "Decision", "MeasuredOutcome", "Verdict"]
