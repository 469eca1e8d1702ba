"""The fork server: children forked from a process that has already imported what they run.

Spawning `python -m topics_actors.<role>` costs every child a fresh interpreter and its own
copy of the same modules: about 0.3-0.5 s of CPU and 20 MB of private memory each, six
times on a node's start. So once the supervisor holds the data dir's lock, before it makes
any thread or ZeroMQ context, it imports the children's entry modules itself, freezes them
out of the collector's passes and forks the fork server (start()), which waits for
requests on a socket pair. For each request it forks a
child that takes the descriptors sent along (the data dir's lock, the HTTP socket: passed
with SCM_RIGHTS, under the numbers they have in the supervisor), closes every other one,
sets its process title to the command line it stands for (`python -m topics_actors.shard
--options {...}`, as `ps` showed before) and runs the module's main(); the pages of the
imported modules stay shared, copy-on-write.

Every child is still the supervisor's own: the server forks twice and the middle process
exits at once, so the child is re-parented to the supervisor, which is a child subreaper
(PR_SET_CHILD_SUBREAPER). The supervisor waits for, signals and restarts it by pid like a
Popen child (ForkedProcess), and the child waits until the supervisor is its parent before
it starts (its die-with-parent check needs that). The server itself holds no state: when it
is gone (killed, or on a system without prctl) the supervisor spawns children as fresh
interpreters again, as before.
"""

from __future__ import annotations

import fcntl
import gc
import importlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback

from topics_actors.allocator_policy import release_free_memory
from topics_actors.libc import PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, prctl

log = logging.getLogger(__name__)

PRELOAD = ("topics_actors.shard.__main__", "topics_actors.compactor.__main__",
           "topics_actors.reclaimer.__main__", "topics_actors.gateway.__main__")
REQUEST_MAX_BYTES = 1 << 20
MAX_FDS = 16
REPLY_TIMEOUT_S = 10.0
REPARENT_WAIT_S = 5.0
POLL_S = 0.005
BYTES_HEADER = 33          # sys.getsizeof(b""): a bytes object of n bytes asks for 33 + n
_FILLERS: list = []        # what fills the image's free small blocks, kept for good


class ForkedProcess:
    """The part of subprocess.Popen the process table uses, for a child that the fork
    server made and the kernel re-parented to this process."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:     # not ours after all: it cannot be waited for
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(POLL_S)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:       # an exited child is not signalled: its pid may be reused
            os.kill(self.pid, sig)


class ForkServer:
    """The supervisor's end: start() once, spawn() per child, close() at the end."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD):
        self.preload = preload
        self.sock: socket.socket | None = None
        self.pid = 0

    def start(self) -> bool:
        """Import the children's modules and fork the server; call while this process has
        one thread. False (nothing started) where a child subreaper cannot be had."""
        if not prctl(PR_SET_CHILD_SUBREAPER, 1):
            log.warning("event=fork_server_unavailable reason=no_subreaper")
            return False
        _import_frozen(self.preload)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:
            ours.close()
            _serve(theirs, supervisor)     # never returns
        theirs.close()
        self.sock, self.pid = ours, pid
        return True

    def spawn(self, argv: list[str], keep_fds: tuple[int, ...]) -> ForkedProcess | None:
        """A child running `argv` (`python -m <module> <args>`), or None when the server
        is gone (the caller then spawns it the old way)."""
        if self.sock is None or len(argv) < 3 or argv[1] != "-m":
            return None
        request = {"module": argv[2], "args": argv[3:], "keep": list(keep_fds),
                   "title": " ".join(argv)}
        try:
            self.sock.settimeout(REPLY_TIMEOUT_S)
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(keep_fds))
            reply = json.loads(self.sock.recv(4096) or b"{}")
        except (OSError, ValueError) as error:
            log.warning("event=fork_server_gone error=%r", error)
            self.close()
            return None
        if "pid" not in reply:
            log.warning("event=fork_server_failed reply=%r", reply)
            return None
        return ForkedProcess(reply["pid"])

    def close(self) -> None:
        """The server holds nothing worth a goodbye (and may be stopped, SIGSTOP): it is
        killed and reaped."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0


def _import_frozen(modules: tuple[str, ...]) -> None:
    """Import the children's modules here, in the supervisor, with the collector off, then
    freeze every object: the fork server and every child then share one copy, and no
    collector pass in any of them writes to (and so copies) the pages it lies on.

    Imported in the fork server instead, every refcount it raised on an object the
    supervisor had imported copied that page, once in each: 4 MB more for the node
    (docs/OPERATIONS.md 17).

    Then the image is packed: the free blocks the imports left among the objects are
    filled (fill_free_blocks) and the C heap's free pages handed back, so that what a
    process allocates later lands on pages of its own instead of copying shared ones."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        for module in modules:
            importlib.import_module(module)
    finally:
        gc.freeze()
        fill_free_blocks()
        release_free_memory()
        if enabled:
            gc.enable()


def fill_free_blocks() -> int:
    """Fill the free blocks of the small-object allocator's pools (blocks of 48 to 512
    bytes) with bytes objects kept for good; how many blocks it filled.

    Python gives a new small object a free block of a pool that already holds others, and
    the imports leave such blocks scattered over the image. A child forked from it that
    allocated there copied a page it shared for each one; filled, its objects take pools of
    their own, dense on new pages. The fillers cost their bytes once, shared by all (about
    0.5 MB). Call with no other thread running: the allocator's figures are read from its
    report on the C stderr, which is redirected for the moment."""
    holes = free_blocks(_allocator_report())
    fillers = [b""] * sum(count for _, count in holes)
    i = 0
    for size, count in holes:
        for _ in range(count):
            fillers[i] = bytes(size - BYTES_HEADER)
            i += 1
    _FILLERS.append(fillers)
    return i


def free_blocks(report: str) -> list[tuple[int, int]]:
    """(block size, free blocks in pools in use) per size class a bytes object can fill (48
    bytes and more), from sys._debugmallocstats(); empty for a report without that table."""
    rows = re.findall(r"^\s+\d+\s+(\d+)\s+\d+\s+\d+\s+(\d+)\s*$", report, re.MULTILINE)
    return [(int(size), int(free)) for size, free in rows
            if int(size) > BYTES_HEADER + 1 and int(free) > 0]


def _allocator_report() -> str:
    if not hasattr(sys, "_debugmallocstats"):       # not CPython
        return ""
    read_end, write_end = os.pipe()    # the report (about 4 KB) fits in a pipe's buffer
    saved = os.dup(2)
    try:
        os.dup2(write_end, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_end)
    with os.fdopen(read_end, "rb") as out:
        return out.read().decode("ascii", "replace")


# --- the server (runs in the forked process) ----------------------------------------------

def _serve(sock: socket.socket, supervisor: int) -> None:
    code = 0
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != supervisor:
            os._exit(0)
        for sig in (signal.SIGINT, signal.SIGTERM):   # it ends when the supervisor's end
            signal.signal(sig, signal.SIG_IGN)         # closes, never on a signal
        os.environ.pop("NOTIFY_SOCKET", None)   # systemd hears the supervisor alone
        _set_title(f"{sys.executable} (topics fork server)")
        while True:
            data, fds, _flags, _addr = socket.recv_fds(sock, REQUEST_MAX_BYTES, MAX_FDS)
            if not data:
                break
            request = json.loads(data)
            try:
                pid = _fork_child(sock, supervisor, request, fds)
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(json.dumps({"pid": pid}).encode())
    except BaseException:   # noqa: BLE001 - the server's death only turns spawning back
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _fork_child(sock: socket.socket, supervisor: int, request: dict, fds: list[int]) -> int:
    """Fork twice; the middle process exits at once so the child goes to the supervisor."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            child = os.fork()
            if child == 0:
                os.close(read_end)
                os.close(write_end)
                _run_child(sock, supervisor, request, fds)    # never returns
            os.write(write_end, str(child).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    text = os.read(read_end, 32)
    os.close(read_end)
    os.waitpid(middle, 0)      # gone: its child now belongs to the subreaper
    return int(text)


def _run_child(sock: socket.socket, supervisor: int, request: dict, fds: list[int]) -> None:
    code = 1
    try:
        sock.close()
        _place_fds(fds, request["keep"])
        _close_fds_but({0, 1, 2, *request["keep"]})
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        deadline = time.monotonic() + REPARENT_WAIT_S
        while os.getppid() != supervisor and time.monotonic() < deadline:
            time.sleep(0.0002)
        _set_title(request["title"])
        sys.argv = [request["module"], *request["args"]]
        module = importlib.import_module(request["module"])
        if hasattr(module, "__path__"):        # `-m package` runs package.__main__
            module = importlib.import_module(request["module"] + ".__main__")
        code = module.main(request["args"]) or 0
    except SystemExit as stop:
        code = _exit_code(stop)
    except BaseException:   # noqa: BLE001 - as the interpreter would: traceback, exit 1
        traceback.print_exc()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _exit_code(stop: SystemExit) -> int:
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1


def _place_fds(received: list[int], numbers: list[int]) -> None:
    """Give each received descriptor the number it has in the supervisor (a child's options
    name the HTTP socket's), by way of numbers above all of them so none is overwritten."""
    if len(received) != len(numbers):
        raise RuntimeError(f"{len(received)} descriptors came for {len(numbers)}")
    high = max([*received, *numbers, 2]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, high) for fd in received]
    for fd, number in zip(moved, numbers):
        os.dup2(fd, number, inheritable=True)
        os.close(fd)


def _close_fds_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass     # the directory's own descriptor, already closed


def _set_title(title: str) -> None:
    """`ps` and /proc/<pid>/cmdline show the child's command line, as a spawned one's (and
    /proc/<pid>/environ no longer the supervisor's first environment, NOTIFY_SOCKET and
    all: setproctitle takes that space for the title)."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(title)
