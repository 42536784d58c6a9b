"""The Ray executor on a real local Ray cluster on loopback: a head and two worker nodes (fake GPUs
as the custom resource `kopt_gpu`, each node's GPU a recorded nvidia-smi replay that a test can make
busy), running the CPU toy repository's benchmark. One cluster serves the whole module."""

from __future__ import annotations

import os
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "kopt-mcp[ray]" to run the cluster tests')

from ray.cluster_utils import Cluster

from kopt_mcp.bench.cluster.ray_executor import RayExecutor
from kopt_mcp.config import ClusterSection
from kopt_mcp.errors import Cancelled, DeviceLost
from kopt_mcp.profilers.none import NoProfiler
from tests.bench.cluster.conftest import switch_probe

LOOPBACK = "127.0.0.1"
FAKE_GPU = "kopt_gpu"


def node_processes(name: str) -> dict[int, str]:
    """pid -> command line of this host's processes started for fake node `name` (its environment says so)."""
    import psutil

    out = {}
    for q in psutil.process_iter(["cmdline"]):
        try:
            if q.environ().get("KOPT_FAKE_NODE") == name:
                out[q.pid] = " ".join(q.info["cmdline"] or [])
        except psutil.Error:
            pass
    return out


def wait_for(cond, timeout_s: float = 30.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.5)
    return cond()


class Local:
    """The running cluster: its nodes by name ("a", "b"), their Ray node ids, the busy switch."""

    def __init__(self, root) -> None:
        self.root = root
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False,
            # a dead node is noticed in about 2 s instead of 15
            "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                               "health_check_failure_threshold": 3}})
        self.nodes = {}
        self.ids = {}
        for name in ("a", "b"):
            self.add(name)
        ray.init(address=self.cluster.address, _node_ip_address=LOOPBACK, log_to_driver=False, namespace="kopt-test")
        self.probe = switch_probe(root / "switch")

    def add(self, name: str):
        node = self.cluster.add_node(num_cpus=1, resources={FAKE_GPU: 1}, node_ip_address=LOOPBACK,
                                     env_vars={"KOPT_FAKE_NODE": name,
                                               "KOPT_LEASE_DIR": str(self.root / name / "leases"),
                                               "KOPT_NODE_CACHE": str(self.root / name / "cache")})
        self.nodes[name], self.ids[name] = node, node.node_id
        return node

    def executor(self, gates, **kw) -> RayExecutor:
        return RayExecutor(ClusterSection(ray_address=self.cluster.address, gpu_resource=FAKE_GPU,
                                          start_timeout_s=60), gates, tag="t", probe_factory=self.probe, **kw)

    def name_of(self, lease) -> str:
        return next(n for n, i in self.ids.items() if i == lease.node_id)


LOOPBACK_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """Ray replaces a loopback address by the host's routable one unless "clusters" are off: off in
    this process (read at call time) and in the nodes (they inherit the environment), for this module."""
    import ray._private.ray_constants as rc

    before_env, before_flag = os.environ.get(LOOPBACK_ONLY), rc.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ONLY] = "0"
    rc.ENABLE_RAY_CLUSTER = False
    try:
        c = Local(tmp_path_factory.mktemp("ray"))
        yield c
        ray.shutdown()
        c.cluster.shutdown()
    finally:
        rc.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(LOOPBACK_ONLY, None)
        else:
            os.environ[LOOPBACK_ONLY] = before_env


@pytest.fixture
def executor(local, toy):
    ex = local.executor(toy.cfg.gates.model_copy(update={"gpu_wait_s": 0.0, "gpu_poll_s": 1.0}))
    for n in ("a", "b", "c"):
        local.probe.set_busy(n, False)
    yield ex
    ex.close()


def test_measure_and_profile_on_a_node_come_back_with_values_and_logs(local, toy, executor, tmp_path):
    grant = executor.acquire()
    lease = grant.lease
    assert lease is not None and local.name_of(lease) in ("a", "b")
    assert "Ray node 127.0.0.1" in lease.device.name and lease.device.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert grant.outcome.lease.uuid.startswith("GPU-12d4823c")  # the node's gate read its (recorded) GPU

    best = lease.measure(toy.cfg, toy.ws, toy.best, tmp_path / "r1", {})
    assert best.values() == {"n=1": 100.0, "n=2": 200.0} and best.gate.kind == "ok" and best.changes == []
    assert best.run.log_path == str(tmp_path / "r1" / "benchmark.log") and best.run_dir == str(tmp_path / "r1")
    assert "toy benchmark run" in (tmp_path / "r1" / "benchmark.log").read_text()
    assert (tmp_path / "r1" / "results" / "bench.csv").is_file()  # by its path under the workdir

    cand = toy.candidate({"1": 50.0, "2": 200.0})
    m = lease.measure(toy.cfg, toy.ws, cand, tmp_path / "r2", {}, base=toy.best)
    assert m.values() == {"n=1": 50.0, "n=2": 200.0} and m.snapshot == cand
    assert lease.trees == {toy.best, cand}
    (best_tree, full), (cand_tree, diff) = lease.sent
    assert (best_tree, cand_tree) == (toy.best, cand) and diff < full  # the candidate went as its diff

    prof = lease.make_profiler("auto")  # chosen on the node: no CUPTI or ncu there
    assert isinstance(prof, NoProfiler)
    p = lease.profile(toy.cfg, prof, toy.ws, cand, tmp_path / "r3", {}, base=toy.best)
    assert p.error is None and p.trace.backend == "none" and p.log_path == str(tmp_path / "r3" / "profile.log")
    assert (tmp_path / "r3" / "profile.log").is_file()

    lease.release()
    lease.release()  # idempotent
    assert executor.leases == []
    again = executor.acquire(prefer=lease.device_id).lease  # the next call's lease
    m2 = again.measure(toy.cfg, toy.ws, cand, tmp_path / "r5", {}, base=toy.best)
    assert m2.values() == {"n=1": 50.0, "n=2": 200.0}
    assert [t for t, _ in again.sent] == [toy.best, cand] and len(executor._packs) == 2  # nothing packed twice
    again.release()
    with pytest.raises(DeviceLost, match="already released"):
        lease.measure(toy.cfg, toy.ws, cand, tmp_path / "r4", {})


def test_a_busy_gpu_sends_the_job_to_the_other_node(local, toy, executor):
    local.probe.set_busy("a", True)
    for _ in range(2):  # never node a, however the nodes are ordered
        lease = executor.acquire().lease
        assert lease is not None and local.name_of(lease) == "b"
        lease.release()
    local.probe.set_busy("b", True)
    grant = executor.acquire()
    # the gate's message is the product: it names what keeps each device busy
    assert grant.lease is None and grant.outcome.reason.startswith("no idle GPU on the Ray cluster after 0 s")
    assert grant.outcome.reason.count("utilization 99%") == 2 and local.ids["a"][:8] in grant.outcome.reason


def test_prefer_takes_the_named_node_when_idle(local, executor):
    for name in ("a", "b"):  # each in turn: the order of the cluster's nodes cannot pass for it
        lease = executor.acquire(prefer=f"{local.ids[name]}:nvidia:0:GPU-x").lease
        assert local.name_of(lease) == name
        assert lease.device_id == f"{local.ids[name]}:nvidia:0:GPU-12d4823c-c93c-be36-630b-84be7a395e90"
        lease.release()


def test_nodes_where_a_lease_was_lost_go_last_even_when_preferred(local, executor):
    executor.lost_nodes.add(local.ids["a"])
    order = [n.node_id for n in executor.nodes(prefer=f"{local.ids['a']}:nvidia:0:GPU-x")]
    assert order[-1] == local.ids["a"] and local.ids["b"] in order


def test_no_node_with_the_resource_waits_then_says_what_to_check(local, toy):
    from kopt_mcp.testing.toy import FakeClock

    clock = FakeClock()
    seen = []
    ex = RayExecutor(ClusterSection(ray_address=local.cluster.address, gpu_resource="no_such_gpu"),
                     toy.cfg.gates.model_copy(update={"gpu_wait_s": 2.0, "gpu_poll_s": 1.0}),
                     sleep=clock.sleep, clock=clock)
    grant = ex.acquire(progress=lambda w, t, msg: seen.append(msg))
    # the gate's message is the product: it names what keeps each device busy
    assert grant.lease is None and "no alive node of the Ray cluster has the resource 'no_such_gpu'" in grant.outcome.reason
    assert clock.slept == [1.0, 1.0] and len(seen) == 2 and grant.outcome.polls == 3
    cancel = threading.Event()
    cancel.set()
    # "cancelled" is the gate's marker of a cancelled wait (GateOutcome has no code)
    assert ex.acquire(cancel=cancel).outcome.reason == "cancelled"


CORRUPT_STORE = """
import glob, os, tempfile
for f in glob.glob(os.path.join(tempfile.gettempdir(), "kopt-node-*", "repo", "*", ".git", "objects", "pack", "*.pack")):
    os.chmod(f, 0o644)
    with open(f, "r+b") as fh:
        fh.write(b"\\0" * os.path.getsize(f))
"""


def test_a_run_that_corrupts_the_node_store_fails_and_best_is_shipped_anew(toy, executor, tmp_path):
    import git

    from kopt_mcp.bench.sandbox import sandbox_problem

    lease = executor.acquire().lease
    assert lease.measure(toy.cfg, toy.ws, toy.best, tmp_path / "b1", {}).values()["n=1"] == 100.0
    cheat = toy.candidate({"1": 50.0, "2": 200.0}, extra=CORRUPT_STORE)
    if sandbox_problem() is None:  # the node's git store is out of the run's view: nothing to corrupt
        assert lease.measure(toy.cfg, toy.ws, cheat, tmp_path / "cheat", {}, base=toy.best).values()["n=1"] == 50.0
        shipped = len(lease.sent)
        assert lease.measure(toy.cfg, toy.ws, toy.best, tmp_path / "b2", {}).values()["n=1"] == 100.0
        assert lease.sent[shipped:] == []  # the store is intact: BEST is not shipped again
        return lease.release()
    with pytest.raises(git.GitCommandError):  # its own run-changes check can no longer read the store
        lease.measure(toy.cfg, toy.ws, cheat, tmp_path / "cheat", {}, base=toy.best)
    shipped = len(lease.sent)
    again = lease.measure(toy.cfg, toy.ws, toy.best, tmp_path / "b2", {})  # refused as damaged, shipped anew
    assert again.values() == {"n=1": 100.0, "n=2": 200.0} and again.changes == []
    assert [t for t, _ in lease.sent[shipped:]] == [toy.best]
    lease.release()


def test_cancel_kills_the_run_on_the_node(toy, executor, tmp_path):
    lease = executor.acquire().lease
    cand = toy.candidate({"1": 50.0, "2": 200.0}, SLEEP_S=120)
    cancel = threading.Event()
    threading.Timer(3.0, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        lease.measure(toy.cfg, toy.ws, cand, tmp_path / "r", {}, cancel=cancel)
    assert time.monotonic() - t0 < 60
    lease.release()


def test_a_node_lost_mid_run_raises_device_lost_and_the_retry_lands_on_another(local, toy, executor, tmp_path):
    node_c = local.add("c")
    local.probe.set_busy("a", True)
    local.probe.set_busy("b", True)
    lease = executor.acquire().lease
    assert lease is not None and local.name_of(lease) == "c"
    cand = toy.candidate({"1": 50.0, "2": 200.0}, SLEEP_S=120)
    threading.Timer(4.0, local.cluster.remove_node, (node_c,), {"allow_graceful": False}).start()
    t0 = time.monotonic()
    with pytest.raises(DeviceLost, match="was lost during the run"):
        lease.measure(toy.cfg, toy.ws, cand, tmp_path / "lost", {}, base=toy.best)
    assert time.monotonic() - t0 < 100
    assert lease.node_id in executor.lost_nodes
    lease.release()  # a lost lease releases without waiting for its node
    # Ray SIGKILLs the dying worker's children (the run's launcher): only the benchmark may be left
    assert wait_for(lambda: all("bench.py" in c for c in node_processes("c").values()))

    local.probe.set_busy("a", False)
    local.probe.set_busy("b", False)
    retry = executor.acquire(prefer=lease.device_id).lease  # the dead node is not offered again
    assert retry is not None and local.name_of(retry) in ("a", "b")
    assert node_processes("c") == {}  # the new job on this host ended the dead job's orphaned benchmark
    fast = toy.candidate({"1": 50.0, "2": 200.0})
    assert retry.measure(toy.cfg, toy.ws, fast, tmp_path / "retry", {}, base=toy.best).values()["n=1"] == 50.0
    retry.release()


def test_a_server_process_joins_by_address_and_prints_nothing_on_stdout(local, toy):
    """What `serve` does: connect by [cluster] ray_address, lease, release; under stdio MCP stdout is
    the protocol, so Ray must not write a byte there."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from kopt_mcp.bench.cluster.ray_executor import RayExecutor\n"
        "from kopt_mcp.config import ClusterSection, GatesSection\n"
        "ex = RayExecutor(ClusterSection(ray_address=sys.argv[1], gpu_resource='kopt_gpu'),\n"
        "                 GatesSection.model_validate_json(sys.argv[2]), tag='stdio')\n"
        "grant = ex.acquire()\n"
        "sys.stderr.write('device: ' + grant.lease.device.name + '\\n')\n"
        "ex.close()\n"
    )
    gates = toy.cfg.gates.model_copy(update={"gpu_wait_s": 0.0}).model_dump_json()  # gpu_probe none: the node's CPU
    out = subprocess.run([sys.executable, "-c", script, local.cluster.address, gates], capture_output=True, check=False,
                         timeout=300, cwd=toy.path)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout == b""
    assert b"device: " in out.stderr and b"on Ray node 127.0.0.1" in out.stderr


def test_the_cpu_example_on_a_node_best_a_candidate_and_a_wrong_one(local, executor, tmp_path):
    """The bundled CPU example (examples/cpu_softmax) through one Ray lease: BEST and the vectorized
    candidate pass with the same config classes; the in-place candidate that overwrites the caller's
    input comes back `incorrect`, with its log. No timing is judged (the machine is loaded)."""
    import git

    from kopt_mcp import vcs
    from kopt_mcp.commands.demo import prepare_repo
    from kopt_mcp.config import load_config
    from kopt_mcp.paths import examples_dir

    example = examples_dir() / "cpu_softmax"
    repo = prepare_repo(example, tmp_path / "cpu_softmax")
    ws, cfg = git.Repo(repo), load_config(repo / "kopt.toml").target
    best = vcs.tree_of(ws, "HEAD")
    trees = []
    for patch in ("01-vectorize.patch", "04-inplace-buggy.patch"):  # as the demo applies them
        ws.git.apply("--whitespace=nowarn", str(example / "candidates" / patch))
        trees.append(vcs.snapshot_tree(ws))
    ws.git.checkout("--", ".")
    vectorized, buggy = trees

    lease = executor.acquire().lease
    b = lease.measure(cfg, ws, best, tmp_path / "best", {})
    assert b.gate.kind == "ok" and b.values() and all(k.startswith("rows=") for k in b.values())
    v = lease.measure(cfg, ws, vectorized, tmp_path / "vectorized", {}, base=best)
    assert v.gate.kind == "ok" and set(v.values()) == set(b.values())
    w = lease.measure(cfg, ws, buggy, tmp_path / "buggy", {}, base=best)
    assert w.gate.kind == "incorrect" and w.table.failing() and (tmp_path / "buggy" / "benchmark.log").is_file()
    lease.release()


def test_the_referee_measures_through_ray_when_the_config_names_a_cluster(local, tmp_path):
    """End to end through the referee: a toy session whose kopt.toml names the local cluster
    (`[cluster] ray_address`) takes its baseline, judges a clear win `improved` (fixed planted
    numbers: no noise can flip it) and commits it, every run on a Ray node's fake GPU; the ledger
    names that node's device on the baseline, the attempt and the commit; no lease is held after."""
    from kopt_mcp.bench.cluster.ray_executor import executor_for
    from kopt_mcp.referee import Referee
    from kopt_mcp.testing.toy import fake_services, make_toy_repo, set_kernel

    for n in ("a", "b"):
        local.probe.set_busy(n, False)
    cluster = (f'[cluster]\nray_address = "{local.cluster.address}"\ngpu_resource = "{FAKE_GPU}"\n'
               'start_timeout_s = 60\n')
    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0},
                         extra_gates='gpu_wait_s = 0.0\ngpu_poll_s = 1.0\n' + cluster)
    services = fake_services(executor=lambda where, what, _: executor_for(what.cfg, where.tag, probe_factory=local.probe))
    ref = Referee(repo, tag="ray", services=services)
    try:
        assert ref.jobs.executor.__class__.__name__ == "RayExecutor"
        base = ref.run_benchmark()
        assert base.baseline_recorded, base.reason
        set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0})
        v = ref.save_and_test(hypothesis="halve both classes")
        assert v.verdict == "improved", v.reason
        c = ref.commit_improvement("halved")
        assert c.committed, c.reason
        events = {e["event"]: e for e in ref.books.store.ledger()}
        node_ids = set(local.ids.values())
        for kind, key in (("baseline", "device_id"), ("attempt", "device"), ("commit", "device")):
            dev = events[kind][key]
            assert dev and any(i in dev for i in node_ids), (kind, dev)
        assert ref.jobs.job is None
    finally:
        ref.close()
