"""The CUPTI trace collector: the parent of a profiled benchmark command (standard library only;
run as a script by the server's interpreter, see `CuptiProfiler.wrap`).

    python cupti_collect.py OUT_DIR -- COMMAND...

It listens on a unix SOCK_SEQPACKET socket in a private temporary folder, runs COMMAND with
KOPT_CUPTI_SOCK naming it (KOPT_CUPTI_OUT removed), and takes every Python process's launches as
the injector (cupti_inject/sitecustomize.py) streams them. Each connection's process id comes from
the kernel (SO_PEERCRED), not from the message. When COMMAND has ended (and the connections have
closed, or GRACE_S later) it writes, per connection, `cupti-<pid>.json` (format 2, with
"transport": "stream", "sent": the count the process says it sent, "closed": whether its closing
message came) and then `collected-cupti.json`, the manifest: each file's SHA-256. parse_cupti_dir
reads only the files of the manifest and checks their hashes, so a trace file the benchmark
writes or rewrites is not used. A process that ended without its closing message (os._exit, a
crash, a kill) or whose counts disagree is marked "error". Exits with COMMAND's exit status
(128 + signal number for a signal).

Code inside the benchmark process can still send forged rows over its own connection, but it can
no longer rewrite the file that is read: the trace is harder to forge, not unforgeable.
"""

import hashlib
import json
import os
import selectors
import socket
import struct
import subprocess
import sys
import tempfile
import time

GRACE_S = float(os.environ.get("KOPT_CUPTI_GRACE_S", "10"))  # tests shorten it
MANIFEST = "collected-cupti.json"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _trace_class():
    sys.path.insert(0, os.path.join(_HERE, "cupti_inject"))
    try:
        from kopt_cupti_trace import Trace
    finally:
        sys.path.pop(0)
    return Trace


class _Conn:
    def __init__(self, sock, pid, trace):
        self.sock, self.pid, self.trace = sock, pid, trace
        self.argv, self.sent, self.closed, self.error, self.bad = None, None, False, None, 0


def _peer_pid(sock) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]


def _handle(conn: _Conn, data: bytes) -> None:
    try:
        msg = json.loads(data)
        kind = msg["t"]
        if kind == "hello":
            conn.argv = msg.get("argv")
        elif kind == "rows":
            for row in msg["rows"]:
                conn.trace.add_row(row)
        elif kind == "ext":
            conn.trace.add_ext(msg["pairs"])
        elif kind == "unit":
            conn.trace.add_unit(msg)
        elif kind == "windows":
            conn.trace.add_windows(msg["k"], msg["w"])
        elif kind == "code":
            conn.trace.add_code(msg["name"], msg["shas"])
        elif kind == "note":
            conn.trace.add_note(msg["text"])
        elif kind == "end":
            conn.sent, conn.error, conn.closed = int(msg["sent"]), msg.get("error"), True
        else:
            conn.bad += 1
    except (ValueError, KeyError, TypeError):
        conn.bad += 1


def collect(out_dir: str, command: list) -> int:
    """Run `command` under the collector, write the trace files and manifest into `out_dir`;
    returns the exit status to exit with."""
    trace_cls = _trace_class()
    os.makedirs(out_dir, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="kopt-cupti-")
    path = os.path.join(folder, "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(256)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    env = {k: v for k, v in os.environ.items() if k != "KOPT_CUPTI_OUT"} | {"KOPT_CUPTI_SOCK": path}
    conns: list[_Conn] = []
    child = subprocess.Popen(command, env=env)
    try:
        _receive(child, listener, sel, conns, trace_cls)
    finally:
        sel.close()
        listener.close()
        try:
            os.unlink(path)
            os.rmdir(folder)
        except OSError:
            pass
    _write(out_dir, conns, child.returncode)
    rc = child.returncode
    return 128 - rc if rc < 0 else rc


def _receive(child, listener, sel, conns: list, trace_cls) -> None:
    """Accept the processes' connections and take their messages until `child` has ended and a pass
    found nothing pending (connections waiting to be accepted, data or EOF to read) with none open,
    or GRACE_S s after it ended. New connections are appended to `conns`."""
    ended_at = None
    while True:
        ended_before = ended_at is not None  # a pass only proves idleness if it began after the end
        events = sel.select(timeout=0.2)
        for key, _ in events:
            if key.fileobj is listener:
                try:
                    sock, _ = listener.accept()
                except BlockingIOError:
                    continue
                conn = _Conn(sock, _peer_pid(sock), trace_cls())
                conns.append(conn)
                sel.register(sock, selectors.EVENT_READ, conn)
                continue
            conn = key.data
            try:
                data = conn.sock.recv(1 << 20)
            except OSError:
                data = b""
            if data:
                _handle(conn, data)
            else:
                sel.unregister(conn.sock)
                conn.sock.close()
                conn.sock = None
        if ended_at is None and child.poll() is not None:
            ended_at = time.monotonic()
        if ended_at is not None:
            idle = ended_before and not events and all(c.sock is None for c in conns)
            if idle or time.monotonic() - ended_at > GRACE_S:
                return


def _write(out_dir: str, conns: list, returncode: int) -> None:
    """One trace file per connection (marked "error" where the process did not close its trace or
    the counts disagree), then the manifest of their SHA-256 hashes, written last and atomically."""
    files = {}
    for n, c in enumerate(conns):
        error = c.error
        if not c.closed:
            error = ("the process ended without closing its CUPTI trace (os._exit, a crash or a kill, or it "
                     f"outlived the command by {GRACE_S:g} s): its launches are not counted")
        elif c.sent != c.trace.records or c.bad:
            error = (f"the process says it sent {c.sent} kernel records, the collector received "
                     f"{c.trace.records} ({c.bad} unreadable message(s)): not counted")
        c.trace.error = error
        doc = c.trace.doc(pid=c.pid, argv=c.argv, transport="stream", sent=c.sent, closed=c.closed)
        name = f"cupti-{c.pid}.json" if sum(x.pid == c.pid for x in conns) == 1 else f"cupti-{c.pid}-{n}.json"
        data = json.dumps(doc).encode()
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        files[name] = hashlib.sha256(data).hexdigest()
    manifest = {"files": files, "connections": len(conns), "exit": returncode}
    tmp = os.path.join(out_dir, MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    os.replace(tmp, os.path.join(out_dir, MANIFEST))


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print("usage: cupti_collect.py OUT_DIR -- COMMAND...", file=sys.stderr)
        sys.exit(2)
    sys.exit(collect(sys.argv[1], sys.argv[3:]))
