"""The `streamdedup` command in the tests, forked from a process that imported it once.

The suite runs the command some 600 times, and a fresh interpreter spends about 0.2 s of
CPU importing numpy, the engine, lmdb and kafka-python before the command does
anything: a third of the suite's CPU on a 2-core machine (measured with process
accounting).  A server process, one per test process and started on first use,
imports them once and forks a child for each command.  The child is a process of its
own, as `python -m streamdedup.cli` would be: its own pid, exit status, working
directory, environment, stdin, stdout and stderr (pipes, as `subprocess.run` gives);
it runs the same entry point and ends as the interpreter does (threads joined, atexit
handlers run, buffers flushed).  Only the imported modules are shared.

What a module decides when it is imported cannot follow the child's environment, so a
command whose environment sets an `IMPORT_TIME` variable other than the server did
runs in a fresh interpreter instead, as do the tests that are about the interpreter
itself (they start it with `subprocess` directly).

The server forks an attendant per request, which forks the command and reports its
pid and then its exit status over the request's socket; the server itself holds no
descriptor of a request and runs no thread (a fork copies only the forking thread).
It exits when the test process that started it closes its stdin (or dies).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "streamdedup" / "cli" / "__main__.py"
# read by a module when it is imported (streamdedup.kernels, streamdedup.store.index,
# numpy's OpenBLAS, the interpreter)
IMPORT_TIME = ("STREAMDEDUP_KERNELS", "STREAMDEDUP_DISK_HEADROOM", "OPENBLAS_NUM_THREADS")
# what the commands import, loaded before any fork (streamdedup.cli first: it sets
# OPENBLAS_NUM_THREADS before numpy loads)
PRELOAD = (
    "streamdedup.cli",
    "streamdedup.cli.settings",
    "streamdedup.cli.worker",
    "streamdedup.cli.seal",
    "streamdedup.filemode.run",
    "streamdedup.kafka.worker",
    "streamdedup.kafka.replay",
)
_INT = struct.Struct("!i")
# what a fresh interpreter runs: the command line a forked command stands for
COMMAND = [sys.executable, "-m", "streamdedup.cli"]


# the environment as the test process started (before any test changed it): the
# server's, which decides what its imports decided
_STARTED_WITH = dict(os.environ)


class ForkServer:
    """The client: starts the server and runs commands through it."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="streamdedup-forks-")
        self.path = os.path.join(self._dir, "socket")
        self.env = dict(_STARTED_WITH)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkserver", self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if not ready.startswith(b"ready "):
            raise RuntimeError(f"the fork server did not start (exit {self.proc.wait()})")
        # the server's environment after its imports (streamdedup.cli sets a default)
        self.imported_with: dict[str, str | None] = json.loads(ready[6:])
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        shutil.rmtree(self._dir, ignore_errors=True)

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a command with `env` sees what a fresh interpreter would."""
        effective = {"OPENBLAS_NUM_THREADS": "1", **env}  # streamdedup.cli's default
        return all(effective.get(k) == v for k, v in self.imported_with.items()) and all(
            env.get(k) == self.env.get(k) for k in {*env, *self.env} if k.startswith("PYTHON")
        )

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        stdin: bytes | None,
        cwd: Path | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[bytes]:
        args = [*COMMAND, *argv]
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = {"argv": argv, "env": env, "cwd": str(cwd or os.getcwd())}
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(self.path)
            socket.send_fds(conn, [json.dumps(request).encode()], [in_r, out_w, err_w])
            for fd in (in_r, out_w, err_w):
                os.close(fd)
            pid = _INT.unpack(conn.recv(_INT.size))[0]
            feeder = threading.Thread(target=_feed, args=(in_w, stdin or b""), daemon=True)
            feeder.start()
            conn.settimeout(timeout)
            try:
                out, err, status = _collect(out_r, err_r, conn, timeout)
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(args, timeout) from None
            finally:
                os.close(out_r)
                os.close(err_r)
            feeder.join()
        return subprocess.CompletedProcess(args, status, out, err)


def _feed(fd: int, data: bytes) -> None:
    """The command's stdin: `data`, then end of file (a command that stops reading
    early closes its end; what is left is dropped, as `subprocess.run` does)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)


def _collect(
    out_r: int, err_r: int, conn: socket.socket, timeout: float
) -> tuple[bytes, bytes, int]:
    """Both pipes to their end, then the exit status."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            ready = sel.select(timeout)
            if not ready:
                raise TimeoutError
            for key, _ in ready:
                data = os.read(key.fd, 1 << 16)  # type: ignore[arg-type]
                if data:
                    chunks[key.fd].append(data)  # type: ignore[index]
                else:
                    sel.unregister(key.fd)
    raw = conn.recv(_INT.size)
    if len(raw) != _INT.size:
        raise RuntimeError("the fork server's attendant ended without a status")
    return b"".join(chunks[out_r]), b"".join(chunks[err_r]), _INT.unpack(raw)[0]


_server: ForkServer | None = None
_lock = threading.Lock()


def arguments(command: list[str]) -> list[str]:
    """The command's own arguments in a full `python -m streamdedup.cli ...` line."""
    if command[: len(COMMAND)] != COMMAND:
        raise ValueError(f"not a streamdedup command line: {command[:4]}")
    return command[len(COMMAND) :]


def run(
    argv: list[str],
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[bytes]:
    """`python -m streamdedup.cli *argv` with `os.environ` plus `env`, its output
    captured: forked from the server where it would see the same, else a fresh
    interpreter."""
    global _server
    full_env = {**os.environ, **(env or {})}
    with _lock:
        if _server is None:
            _server = ForkServer()
        server = _server
    if not server.serves(full_env):
        return subprocess.run(
            [*COMMAND, *argv],
            input=stdin or b"",
            capture_output=True,
            env=full_env,
            cwd=cwd,
            timeout=timeout,
        )
    return server.run(argv, full_env, stdin, cwd, timeout)


# ------------------------------------------------------------------------- the server

Job = tuple[dict[str, object], list[int]]


def _serve(path: str) -> Job | None:
    """Serve until the test process closes our stdin (None); in a command's process,
    return what it is to run (so that its SystemExit is raised at the top)."""
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # attendants are reaped by the kernel
    sys.stdout.write(f"ready {json.dumps({k: os.environ.get(k) for k in IMPORT_TIME})}\n")
    sys.stdout.flush()
    with selectors.DefaultSelector() as sel:
        sel.register(listener, selectors.EVENT_READ)
        sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj is not listener:
                    return None  # the test process closed our stdin, or died
                conn, _ = listener.accept()
                if os.fork() == 0:
                    sel.close()
                    listener.close()
                    return _attend(conn)  # returns in the command's process only
                conn.close()


def _attend(conn: socket.socket) -> Job:
    """In the attendant: fork the command, report its pid, then its exit status."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        pid = os.fork()
        if pid == 0:
            conn.close()
            return json.loads(msg), fds
        for fd in fds:
            os.close(fd)
        conn.send(_INT.pack(pid))
        _, status = os.waitpid(pid, 0)
        conn.send(_INT.pack(os.waitstatus_to_exitcode(status)))
    except OSError:
        pass  # the test process went away: nobody to report to
    os._exit(0)


def _become(request: dict[str, object], fds: list[int]) -> None:
    """In the command's process: its descriptors, directory, environment and argv,
    then what `python -m streamdedup.cli` runs (with streamdedup.cli's own
    OPENBLAS_NUM_THREADS default)."""
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    os.chdir(str(request["cwd"]))
    env = request["env"]
    argv = request["argv"]
    assert isinstance(env, dict) and isinstance(argv, list)
    os.environ.clear()
    os.environ.update(env)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.argv = [str(MAIN), *argv]
    from streamdedup.cli.main import entry

    try:
        status = entry()
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:  # as the interpreter reports an uncaught exception
        traceback.print_exc()
        status = 1
    _end(status)


def _exit_status(code: object) -> int:
    """`sys.exit(code)`'s status, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _end(status: int) -> None:
    """End as the interpreter ends a process (non-daemon threads joined, atexit
    handlers run, stdout and stderr flushed), without tearing down every module the
    server imported: half the CPU of a short command (0.12 -> 0.055 s, one-line dedup)."""
    threading._shutdown()  # type: ignore[attr-defined]  (what Py_FinalizeEx calls first)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # Python's status when flushing stdout fails at exit
    os._exit(status)


if __name__ == "__main__":
    job = _serve(sys.argv[1])
    if job is not None:
        _become(*job)
