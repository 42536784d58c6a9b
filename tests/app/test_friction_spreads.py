"""Issue 36 item 2's leftover, replayed by an MCP client on the CPU toy: one result showed "a global
spread of 4%" beside "per-class spreads of 17-29%", both called `spread_pct` / "spread", and nothing said
which the keep's test used. The global number is the run-to-run spread of the global target, the
geometric mean over the config classes: noise that is independent between classes averages out in it.

Planted exactly (100 x ln units, baseline runs 1-3 of three classes): n=1 0, +24, 0; n=2 0, -41, 0;
n=3 0, +34, 0. Each class's spread (successive differences, rules/stats.py noise_from_groups) is
24 / sqrt(2) = 16.97%, 28.99%, 24.04%; their mean moves 0, +5.67, 0, a spread of 4.01%. Each spread is
named for what it measures (`classes[].spread_pct`, `detectable.target_spread_pct`, per class
`detectable.classes[]`), the texts use the field names, and they say which spread the keep's bound uses and
what the noise threshold is compared with."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import anyio
import pytest
from mcp import Client

from kopt_mcp.app.server import build_server
from kopt_mcp.referee import Referee
from kopt_mcp.results_change import Detectable
from kopt_mcp.testing.toy import make_toy_repo, set_kernel

PLANTED = {"1": (100.0, 0.24), "2": (200.0, -0.41), "3": (300.0, 0.34)}  # base value, run 2's log shift
NOISY = {k: [v, v * math.exp(s), v] for k, (v, s) in PLANTED.items()}


async def _replay(ref) -> dict:
    out: dict = {}
    async with Client(build_server(ref)) as c:
        out["baseline"] = (await c.call_tool("run_benchmark", {})).structured_content
        ws = Path((await c.call_tool("status", {})).structured_content["workspace"])
        set_kernel(ws, {"1": 50.0, "2": 100.0, "3": 150.0})  # 2x on every class
        out["verdict"] = (await c.call_tool("save_and_test", {"hypothesis": "halve"})).structured_content
    return out


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spreads")
    ref = Referee(make_toy_repo(tmp / "repo", NOISY), tag="t", lease_dir=tmp / "leases")
    try:
        yield anyio.run(_replay, ref)
    finally:
        ref.close()


def test_the_baseline_names_the_targets_spread_apart_from_each_classs(replay):
    b = replay["baseline"]
    per_class = [round(c["spread_pct"], 2) for c in b["classes"]]
    assert per_class == [16.97, 28.99, 24.04]  # each class's own run-to-run spread
    d = b["detectable"]
    assert (d["target"], d["target_spread_pct"], d["df"]) == ("global", 4.007, 2)  # the geometric mean's
    assert d["spread_pct"] == d["target_spread_pct"]  # the deprecated alias, kept one release
    note = d["note"]
    assert "target_spread_pct 4.01%" in note and "geometric mean over the 3 classes" in note
    assert "classes[].spread_pct 16.97% .. 28.99%" in note
    assert "noise_pct 1% threshold" in note  # what the threshold is: a fixed level, not a measured spread
    # per class, what a verdict targeting that class detects with its own spread: far larger effects
    rows = [(c["key"], c["spread_pct"], c["df"]) for c in d["classes"]]
    assert rows == [("n=1", 16.971, 2), ("n=2", 28.991, 2), ("n=3", 24.042, 2)]
    assert all(c["min_effect_pct"] is None or c["min_effect_pct"] > d["min_effect_pct"] for c in d["classes"])
    lo, hi = min(c["min_effect_pct"] or math.inf for c in d["classes"]), d["min_effect_pct"]
    assert f"+{hi:.2f}%" in note and (lo == math.inf or f"+{lo:.2f}%" in note)


def test_the_verdict_says_which_spread_its_bound_used_and_each_classs(replay):
    v = replay["verdict"]
    assert (v["verdict"], v["target"]) == ("improved", "global")
    iv = v["target_interval"]
    sds = [c["interval"]["sd_delta_pct"] for c in v["classes"]]
    assert iv["sd_delta_pct"] < min(sds) / 3  # the mean's spread is far below every class's
    assert f"sd_delta_pct {iv['sd_delta_pct']:.1f}%" in v["reason"]  # the field's name beside its number
    assert (f"each class on its own, classes[].interval.sd_delta_pct {min(sds):.1f}% .. {max(sds):.1f}%"
            in v["reason"])
    assert "target_interval.sd_delta_pct" in v["reason"] and "geometric mean over the 3 classes" in v["reason"]


def test_the_deprecated_alias_is_marked_in_the_schema():
    field = Detectable.model_fields["spread_pct"]
    assert field.deprecated and "target_spread_pct" in field.description
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = Detectable(target="global", target_spread_pct=2.0, df=2, rounds=3, power=0.8, min_effect_pct=None,
                       min_effect_x=None, rounds_for=[], max_rounds_asked=10, note="")
    assert d.model_dump()["spread_pct"] == 2.0  # filled from target_spread_pct when not given
