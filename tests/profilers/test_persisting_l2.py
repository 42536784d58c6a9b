"""Issue 38 item 2, the cheat first: a candidate that turns persisting L2 on (an access policy window
with hitProp = persisting inside a persisting-L2 set-aside) so do_bench's L2 flush no longer evicts its
inputs. The injector's guard (cupti_inject/kopt_l2.py) runs here against a stand-in CUDA driver (the
four driver functions it calls, holding one context's limit) and a stand-in cupti module (the callback
API calls it makes); the report then travels the real path: the unit's message, kopt_cupti_trace.Trace,
profilers/cupti.py's unit parser, the keep rule by unit (rules/units.py -> rules/hacks.py) on the REAL
recorded Liger units (tests/fixtures/cupti/h200_liger_units) with the reports added (stand-ins)."""

from __future__ import annotations

import ctypes
import enum
import importlib.util

import pytest

from kopt_mcp.evidence.units import PersistingL2Report
from kopt_mcp.profilers.cupti import INJECT_DIR
from kopt_mcp.profilers.cupti_parse import _unit_of
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.hacks import persisting_l2
from kopt_mcp.rules.units import judge_units
from tests.rules.test_units_recorded import POLICY, RUNS, TARGET, _spreads


def _load(name):
    spec = importlib.util.spec_from_file_location(name, INJECT_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


L2, UNITS, TRACE = _load("kopt_l2"), _load("kopt_units"), _load("kopt_cupti_trace")


class FakeDriver:
    """libcuda's cuCtxGetCurrent / cuCtxGetLimit / cuCtxSetLimit / cuCtxResetPersistingL2Cache over one
    context whose persisting-L2 limit starts at `limit` (bytes); `calls` logs them."""

    def __init__(self, limit=0, context=True):
        self.limit, self.context, self.calls = limit, context, []

    def cuCtxGetCurrent(self, ptr):
        ptr._obj.value = 0x1234 if self.context else None
        return 0

    def cuCtxGetLimit(self, ptr, which):
        assert which == 0x06
        ptr._obj.value = self.limit
        self.calls.append("get")
        return 0

    def cuCtxSetLimit(self, which, value):
        assert which == 0x06
        self.limit = value.value
        self.calls.append(f"set {value.value}")
        return 0

    def cuCtxResetPersistingL2Cache(self):
        self.calls.append("reset")
        return 0


def test_cheat_limit_raised_inside_a_unit_is_counted_and_turned_off_again():
    drv = FakeDriver(limit=11_796_480)  # what ncu showed an H200 launch ran with, by default
    guard = L2.PersistingL2(lib=drv)
    sent = []
    units = UNITS.Units(lambda ext: None, lambda: None, sent.append, l2=guard)
    with units.begin("do_bench", "softmax") as u:
        assert drv.limit == 0 and drv.calls == ["get", "set 0", "reset"]  # off before the first invocation
        for i in range(5):
            u.call(lambda: setattr(drv, "limit", 39_321_600) if i == 0 else None, (), {})  # the cheat, first call
    assert drv.limit == 0  # turned off again before invocation 1
    doc = sent[0]["l2"]
    assert (doc["limit_found"], doc["raised"], doc["resets"]) == (11_796_480, 1, 2)


def test_an_honest_unit_only_reads_the_limit_per_invocation():
    drv = FakeDriver(limit=0)
    units = UNITS.Units(lambda ext: None, lambda: None, lambda msg: None, l2=L2.PersistingL2(lib=drv))
    with units.begin("do_bench", "softmax") as u:
        for _ in range(3):
            u.call(lambda: None, (), {})
    assert drv.calls == ["get", "set 0", "reset", "get", "get", "get"]


def test_without_a_driver_or_a_context_nothing_happens_and_nothing_raises():
    guard = L2.PersistingL2(lib=FakeDriver(context=False))
    guard.unit_start(), guard.invocation()
    assert guard.unit_doc()["resets"] == 0 and guard.lib.calls == []
    missing = L2.PersistingL2()
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver is installed here")
    except OSError:
        pass
    missing.unit_start()  # this CPU machine: no libcuda.so.1
    assert missing.unit_doc()["resets"] == 0 and "libcuda.so.1" in missing.unit_doc()["errors"][0]


class FakeCupti:
    """The callback API calls api_counter makes: CallbackDomain, ApiCallbackSite, get_callback_name
    (versioned names as CUPTI spells them), subscribe, enable_callback; `call(domain, cbid)` plays one API call."""

    class CallbackDomain(enum.IntEnum):
        RUNTIME_API = 1
        DRIVER_API = 2

    class ApiCallbackSite(enum.IntEnum):
        API_ENTER = 0
        API_EXIT = 1

    NAMES = {(1, 211): "cudaStreamSetAttribute_v11000", (1, 100): "cudaLaunchKernel_v7000",
             (1, 5): "cudaDeviceSetLimit_v3020", (2, 640): "cuCtxSetLimit", (2, 307): "cuLaunchKernel"}

    def __init__(self):
        self.enabled, self.cb = set(), None

    def get_callback_name(self, domain, cbid):
        if (int(domain), cbid) not in self.NAMES:
            raise ValueError("CUPTI_ERROR_INVALID_PARAMETER")
        return self.NAMES[(int(domain), cbid)]

    def subscribe(self, cb, userdata):
        self.cb = cb
        return object()

    def enable_callback(self, on, subscriber, domain, cbid):
        self.enabled.add((int(domain), cbid))

    def call(self, domain, cbid):
        if (domain, cbid) in self.enabled:
            for site in (0, 1):
                self.cb(None, domain, cbid, type("D", (), {"callback_site": site})())


def test_cheat_access_policy_window_is_reported_by_name_and_the_guards_own_calls_are_not():
    cupti, drv = FakeCupti(), FakeDriver()
    guard = L2.PersistingL2(lib=drv)
    assert L2.api_counter(cupti, guard) == 3  # the watched ones only, not the launches
    drv_set = drv.cuCtxSetLimit
    drv.cuCtxSetLimit = lambda which, value: (cupti.call(2, 640), drv_set(which, value))[1]  # CUPTI sees ours
    guard.unit_start()
    cupti.call(1, 211), cupti.call(1, 211), cupti.call(1, 5), cupti.call(1, 100)  # the benchmark's
    assert guard.unit_doc()["api"] == {"cudaStreamSetAttribute": 2, "cudaDeviceSetLimit": 1}


def test_a_cupti_without_the_callback_api_leaves_the_guard_working():
    guard = L2.PersistingL2(lib=FakeDriver())
    assert L2.api_counter(object(), guard) == 0 and "unavailable" in guard.errors[0]
    guard.unit_start()
    assert guard.unit_doc()["resets"] == 1


def _with_l2(units, **report):
    return [u.model_copy(update={"l2": PersistingL2Report(**report)}) for u in units]


def test_the_report_travels_the_trace_and_the_parser_into_the_unit():
    t = TRACE.Trace()
    t.add_unit({"k": 1, "harness": "do_bench", "label": "x", "invocations": 3,
                "l2": {"limit_found": 0, "raised": 1, "resets": 2, "api": {"cudaStreamSetAttribute": 1}, "errors": []}})
    unit = _unit_of(0, t.units_doc()[0], {})
    assert unit.l2.raised == 1 and unit.l2.api == {"cudaStreamSetAttribute": 1}


def test_cheat_persisting_l2_on_recorded_units_is_refused_by_name():
    before, cand, after = RUNS["0003-best-1"], RUNS["0003-candidate-1"], RUNS["0003-best-2"]
    honest = dict(limit_found=11_796_480, api={"cuCtxSetLimit": 0})
    cheat = dict(limit_found=11_796_480, raised=1, api={"cudaStreamSetAttribute": 1, "cudaDeviceSetLimit": 1})
    d = judge_units(_with_l2(before, **honest), _with_l2(cand, **cheat), _with_l2(after, **honest), TARGET, POLICY,
                    _spreads(3))
    assert not d.kept and d.code == Code.PERSISTING_L2 and d.outcome == "tie"
    assert "cudaStreamSetAttribute x1" in d.reason and "cudaDeviceSetLimit x1" in d.reason
    # the same calls in BEST too (a framework's own): no refusal; the recorded win stands
    same = judge_units(_with_l2(before, **cheat), _with_l2(cand, **cheat), _with_l2(after, **cheat), TARGET, POLICY,
                       _spreads(3))
    assert (same.outcome, same.code) == ("improved", Code.GPU_TIME_WIN)
    assert persisting_l2(before, cand, after) is None  # no reports (an older trace): nothing to say


def test_the_guard_is_off_with_kopt_cupti_l2_0():
    assert L2.guard(FakeCupti(), {"KOPT_CUPTI_L2": "0"}) is None
    g = L2.guard(FakeCupti(), {})
    assert isinstance(g, L2.PersistingL2) and g.api == {}
