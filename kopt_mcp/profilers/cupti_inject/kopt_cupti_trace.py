"""Launch aggregation shared by the CUPTI injector (sitecustomize.py, inside the benchmark) and the
collector (kopt_mcp/profilers/cupti_collect.py, the benchmark's parent): standard library only.

`Trace.add(rec)` takes a CUPTI kernel activity record; `Trace.add_row(row)` a streamed row
(`row_of(rec)`: name, start ns, end ns, grid (x, y, z), block (x, y, z), registers per thread,
static + dynamic shared memory bytes, CUPTI correlation id); `Trace.doc(...)` is the per-process file
(format 3, see sitecustomize.py).

Harness units (format 3): the injector marks the harness's own measurement units (a do_bench call,
a torch.utils.benchmark Timer call, a pytest-benchmark case: kopt_units.py) and tags every CUDA API
call inside one invocation of the timed function with a CUPTI external correlation id
`unit << INV_BITS | invocation` (`add_ext`: correlation id -> that id). It also records each
invocation's host-time window (CUPTI timestamps), because a call may launch from another thread
(torch's autograd engine runs `backward()` on a device thread of its own, where the calling
thread's correlation id is not on the stack): a launch whose API call started inside a window
belongs to that invocation (the row's 9th field, the API call's host start). A launch belongs to the
unit and invocation its external id names, else the window it was launched in; `doc()["units"]`
sums each kernel's GPU time per invocation, per unit, in the harness's order. `add_code(name, [sha256, ...])`: the hashes of the
compiled modules (cubins) a kernel name was found in (compiled-code provenance).
"""

import os
import sys
import threading

MAX_DURATIONS = 20000  # per run of a launch group: enough for its median, bounded file size
# per launch group over all its runs (a run: the kernel keeps this shape until it launches another;
# a harness visiting shapes in turn comes back to a shape later, and those launches must be kept too)
MAX_GROUP_LAUNCHES = 4 * MAX_DURATIONS
#: bits of an external correlation id that number the invocation within its unit
INV_BITS = 24
#: launches kept for attribution to a harness unit (external id or host-time window)
MAX_PENDING = 2000000
#: invocations kept per unit (their median is the unit's figure)
MAX_INVOCATIONS = 20000


def row_of(rec):
    """A CUPTI kernel activity record as a plain list (JSON-ready)."""
    return [str(rec.name), int(rec.start), int(rec.end), _dims(rec, ("grid_x", "grid_y", "grid_z")),
            _dims(rec, ("block_x", "block_y", "block_z")), _int(rec, "registers_per_thread"),
            (_int(rec, "static_shared_memory") or 0) + (_int(rec, "dynamic_shared_memory") or 0),
            _int(rec, "correlation_id")]


class Trace:
    def __init__(self):
        self.lock = threading.Lock()
        self.kernels = {}
        self.first = None
        self.last = None
        self.error = None
        self.records = 0
        self.ext = {}  # correlation id -> external id (unit << INV_BITS | invocation)
        self.launches = []  # (name, duration ns, correlation id, host launch ns or None), for the units
        self.units = {}  # unit -> {"harness", "label", "invocations", "weights", "windows", "kernels": {...}}
        self.notes = []  # what the injector could not do (units, provenance), for the trace's warnings
        self.code = {}  # kernel name -> sha256 of each compiled module (cubin) it was found in

    def add(self, rec):
        """Add one CUPTI kernel activity record."""
        self.add_row(row_of(rec))

    def add_row(self, row):
        """Add one launch as `row_of` gives it (grid/block may be lists or None; the correlation id,
        8th, may be missing or None)."""
        name, start, end, grid, block, regs, smem = row[:7]
        corr = row[7] if len(row) > 7 else None
        host = row[8] if len(row) > 8 else None
        name, start, end = str(name), int(start), int(end)
        grid = None if grid is None else tuple(int(v) for v in grid)
        block = None if block is None else tuple(int(v) for v in block)
        dur = end - start
        shape = {"registers_per_thread": None if regs is None else int(regs),
                 "shared_mem_per_block_bytes": None if smem is None else int(smem),
                 "block_size": None if block is None else block[0] * block[1] * block[2],
                 "grid_size": None if grid is None else grid[0] * grid[1] * grid[2]}
        with self.lock:
            self.records += 1
            k = self.kernels.get(name)
            if k is None:
                k = self.kernels[name] = {"calls": 0, "total_ns": 0, "min_ns": dur, "max_ns": dur, **shape,
                                          "groups": {}, "_last": None}
            g = k["groups"].get((grid, block))
            if g is None:
                g = k["groups"][(grid, block)] = {
                    "grid": grid, "block": block, "registers_per_thread": shape["registers_per_thread"],
                    "shared_mem_bytes": shape["shared_mem_per_block_bytes"], "calls": 0, "total_ns": 0,
                    "launches": [], "_run_kept": 0}
            g["calls"] += 1
            g["total_ns"] += dur
            if k["_last"] != (grid, block):  # this kernel changed shape: a new run of group g starts
                k["_last"] = (grid, block)
                g["_run_kept"] = 0
            if g["_run_kept"] < MAX_DURATIONS and len(g["launches"]) < MAX_GROUP_LAUNCHES:
                g["launches"].append((start, dur))
                g["_run_kept"] += 1
            for field, gfield in (("registers_per_thread", "registers_per_thread"),
                                  ("shared_mem_per_block_bytes", "shared_mem_bytes")):
                if shape[field] is not None and (g[gfield] is None or shape[field] > g[gfield]):
                    g[gfield] = shape[field]
            # one name can be several compiled variants (Triton specializes per constexpr block size):
            # keep the largest, as ncu's parser does (the variant that limits occupancy)
            for field, value in shape.items():
                if value is not None and (k[field] is None or value > k[field]):
                    k[field] = value
            k["calls"] += 1
            k["total_ns"] += dur
            k["min_ns"] = min(k["min_ns"], dur)
            k["max_ns"] = max(k["max_ns"], dur)
            self.first = start if self.first is None else min(self.first, start)
            self.last = end if self.last is None else max(self.last, end)
            if corr is not None and len(self.launches) < MAX_PENDING:
                self.launches.append((name, dur, int(corr), None if host is None else int(host)))

    def add_ext(self, pairs):
        """External correlation records: [correlation id, external id] pairs (CUPTI's
        EXTERNAL_CORRELATION activity, kind CUSTOM0). Launches waiting for them are attributed."""
        with self.lock:
            for corr, ext in pairs:
                self.ext[int(corr)] = int(ext)

    def add_unit(self, msg):
        """One harness unit ended: {"k": unit, "harness": str, "label": str, "invocations": int,
        "weights": {invocation: calls} (Timer blocks run `calls` statements; absent: 1 each)}."""
        with self.lock:
            u = self._unit(int(msg["k"]))
            u["harness"], u["label"] = str(msg.get("harness", "")), str(msg.get("label", ""))[:200]
            u["invocations"] = int(msg.get("invocations", 0))
            u["weights"] = {int(i): int(w) for i, w in (msg.get("weights") or {}).items()}
            u["windows"].extend((int(i), int(a), int(b)) for i, a, b in (msg.get("windows") or []))
            if isinstance(msg.get("l2"), dict):  # kopt_l2.PersistingL2.unit_doc: the process so far
                u["l2"] = msg["l2"]

    def add_windows(self, k, windows):
        """More of unit k's invocation windows ([invocation, start ns, end ns]; streamed in chunks)."""
        with self.lock:
            self._unit(int(k))["windows"].extend((int(i), int(a), int(b)) for i, a, b in windows)

    def add_note(self, text):
        """Something the injector could not do (it goes into the trace's warnings)."""
        with self.lock:
            if len(self.notes) < 20:
                self.notes.append(str(text)[:300])

    def add_code(self, name, shas):
        """Compiled-code provenance: kernel `name` was found in the modules whose cubins hash to
        `shas` (several: one name compiled in several variants, e.g. Triton specializations)."""
        with self.lock:
            self.code[str(name)] = sorted(set(self.code.get(str(name), [])) | {str(s) for s in shas})

    def _unit(self, k):
        u = self.units.get(k)
        if u is None:
            u = self.units[k] = {"harness": "", "label": "", "invocations": 0, "weights": {}, "windows": [],
                                 "kernels": {}}
        return u

    def _attribute(self, name, dur, ext):
        """Add one launch to its unit and invocation (lock held)."""
        unit, inv = ext >> INV_BITS, ext & ((1 << INV_BITS) - 1)
        per = self._unit(unit)["kernels"].setdefault(name, {})
        cell = per.get(inv)
        if cell is None:
            if len(per) >= MAX_INVOCATIONS:
                return
            cell = per[inv] = [0, 0]
        cell[0] += dur
        cell[1] += 1

    def _attribute_all(self):
        """Each kept launch to its unit and invocation: by external id, else by the host-time window
        its API call started in (lock held; run once, by doc())."""
        import bisect

        windows = sorted((a, b, (k << INV_BITS) | i) for k, u in self.units.items() for i, a, b in u["windows"])
        starts = [w[0] for w in windows]
        last_end = {}  # unit -> the end of its last invocation window (ns)
        for a, b, ext in windows:
            last_end[ext >> INV_BITS] = max(last_end.get(ext >> INV_BITS, b), b)
        for k in self.units:
            self.units[k]["kernels"], self.units[k]["between"] = {}, {}
        for name, dur, corr, host in self.launches:
            ext = self.ext.get(corr)
            if ext is None and host is not None and windows:
                j = bisect.bisect_right(starts, host) - 1
                if j >= 0 and host <= windows[j][1]:
                    ext = windows[j][2]
                elif j >= 0 and host <= last_end[windows[j][2] >> INV_BITS]:
                    # launched between two invocations of a unit, outside both (a thread the timed call
                    # left running, work deferred past its window): the unit's, not an invocation's
                    cell = self.units[windows[j][2] >> INV_BITS]["between"].setdefault(name, [0, 0])
                    cell[0] += dur
                    cell[1] += 1
            if ext is not None:
                self._attribute(name, dur, ext)

    def units_doc(self):
        """The harness units in the harness's order: [{"k", "harness", "label", "invocations",
        "weights": {inv: calls}, "kernels": {name: {"inv": [...], "ns": [...], "n": [...]}}}], with
        "between": {name: [ns, launches]} where launches came between its invocations, outside them, and
        "l2" where the persisting-L2 guard reported (kopt_l2.py)."""
        self._attribute_all()
        out = []
        for k in sorted(self.units):
            u = self.units[k]
            kernels = {}
            for name, per in u["kernels"].items():
                invs = sorted(per)
                kernels[name] = {"inv": invs, "ns": [per[i][0] for i in invs], "n": [per[i][1] for i in invs]}
            out.append({"k": k, "harness": u["harness"], "label": u["label"], "invocations": u["invocations"],
                        "weights": {str(i): w for i, w in u["weights"].items()}, "kernels": kernels,
                        **({"l2": u["l2"]} if u.get("l2") else {}),
                        **({"between": u["between"]} if u.get("between") else {})})
        return out

    def doc(self, pid=None, argv=None, **extra):
        """The per-process trace document (format 3), `extra` fields added."""
        kernels = {}
        for name, k in self.kernels.items():
            groups = []
            for g in k["groups"].values():  # records arrive per buffer, not necessarily in launch order
                launches = sorted(g["launches"])
                groups.append({**{f: v for f, v in g.items() if f != "launches" and not f.startswith("_")},
                               "durations_ns": [d for _, d in launches], "starts_ns": [t for t, _ in launches]})
            groups.sort(key=lambda g: g["starts_ns"][0] if g["starts_ns"] else 0)
            kernels[name] = {**{f: v for f, v in k.items() if f != "groups" and not f.startswith("_")}, "groups": groups}
        return {"format": 3, "pid": os.getpid() if pid is None else pid,
                "argv": list(sys.argv) if argv is None else argv, "status": "error" if self.error else "ok",
                "error": self.error, "records": self.records, "kernels": kernels, "first_start_ns": self.first,
                "last_end_ns": self.last, "units": self.units_doc(), "code": dict(self.code), "notes": list(self.notes),
                **extra}


def _int(rec, attr):
    try:
        return int(getattr(rec, attr))
    except Exception:  # noqa: BLE001 - never raise into the benchmark
        return None


def _dims(rec, attrs):
    vals = tuple(_int(rec, a) for a in attrs)
    return None if any(v is None for v in vals) else vals


#: ELF sections of a cubin that hold a kernel's machine code and what the launch needs of it (register
#: and parameter attributes, constant bank, shared memory); line info and symbols are left out
CODE_SECTIONS = (".text", ".nv.info.", ".nv.constant0.", ".nv.shared.")


def code_sha256(binary):
    """The compiled-code provenance hash of a cubin (bytes): "text:" + SHA-256 over its machine-code
    sections (CODE_SECTIONS: name, size and bytes of each, by name) through pyelftools where the
    benchmark's Python can import it, so that a comment or a renamed local, which moves only line info
    (`.debug_line`, `.nv_debug_line_sass`), leaves it unchanged (tests/fixtures/cubin: Triton 3.6's
    ptxas); else "cubin:" + SHA-256 of the whole binary (then any edit of the kernel's source
    changes it). The two kinds never compare equal. Never raises."""
    import hashlib

    try:
        import io

        from elftools.elf.elffile import ELFFile

        parts = sorted((sec.name, sec["sh_size"], sec.data()) for sec in ELFFile(io.BytesIO(binary)).iter_sections()
                       if sec.name.startswith(CODE_SECTIONS))
        if any(name.startswith(".text") for name, _, _ in parts):
            h = hashlib.sha256()
            for name, size, data in parts:
                h.update(f"{name}\0{size}\0".encode() + (data if isinstance(data, bytes) else b""))
            return "text:" + h.hexdigest()
    except Exception:  # noqa: BLE001 - no pyelftools, or not an ELF file: the whole binary
        pass
    return "cubin:" + hashlib.sha256(binary).hexdigest()
