"""The loop's rules, one module each (pure functions; no subprocess, no git, no MCP).

| rule                         | module          |
|------------------------------|-----------------|
| noise rule + confirmation    | noise.py        |
| per-class verdict, divergence, keep metric | verdict.py |
| keep metric by launch group (A/B/A) | keep.py |
| launch groups: targets, BEST's spread, config classes | launch_groups.py |
| launch-group pairing (BEST vs candidate) | pairing.py |
| correctness gate             | correctness.py  |
| repair rule                  | repair.py       |
| stop rule (regressions)      | stop.py         |
| protected files              | protect.py      |

The GPU availability gate lives in `kopt_mcp/gpus/gate.py`; the state machine in `kopt_mcp/session.py`.
"""
