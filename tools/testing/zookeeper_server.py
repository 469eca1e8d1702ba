"""A real ZooKeeper for the cluster tests: the Debian package's jars run as one JVM on
loopback, with its own data dir, an ephemeral client port and its own process group.

`tickTime` is small (250 ms) so sessions can expire in well under a second: the server
clamps a client's session timeout into [2, 20] ticks. The Debian package ships no
`zkServer.sh` that works without its system paths, so the JVM is started directly; the
admin server (Jetty, port 8080) is off and `ruok`/`srvr`/`mntr` are allowed, `ruok` being
the readiness probe.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
LOGGING_JAR = "/usr/share/java/slf4j-simple.jar"     # else the server logs nowhere
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 250


def zookeeper_installed() -> bool:
    return os.path.exists(ZOOKEEPER_JAR) and shutil.which("java") is not None


def free_port() -> int:
    """A port nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def four_letter_word(port: int, word: str, timeout_s: float = 1.0,
                     host: str = "127.0.0.1") -> str:
    """ZooKeeper's admin probe: '' when nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode()
    except OSError:
        return ""


class ZooKeeperServer:
    """Start, kill -9, restart on the same data dir, pause (SIGSTOP) and stop one server."""

    def __init__(self, work_dir: str, port: int | None = None, host: str = "127.0.0.1",
                 argv_prefix: list[str] | None = None):
        """`host`: the address it serves on (loopback, or its network namespace's);
        `argv_prefix`: what runs the JVM (nsenter into that namespace)."""
        self.work_dir = work_dir
        self.host = host
        self.argv_prefix = list(argv_prefix or [])
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(work_dir, "zookeeper.log")

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 30) -> "ZooKeeperServer":
        if not zookeeper_installed():
            raise RuntimeError(f"ZooKeeper is not installed ({ZOOKEEPER_JAR}); the test "
                               "set-up installs the Debian package `zookeeper`")
        config = self._write_config()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.argv_prefix, "java", "-Xmx256m", "-XX:+UseSerialGC", "-cp",
                 f"{ZOOKEEPER_JAR}:{LOGGING_JAR}", MAIN_CLASS, config],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(timeout_s)
        return self

    def _write_config(self) -> str:
        data = os.path.join(self.work_dir, "data")
        os.makedirs(data, exist_ok=True)
        path = os.path.join(self.work_dir, "zoo.cfg")
        with open(path, "w") as out:
            out.write(f"tickTime={TICK_MS}\ndataDir={data}\nclientPortAddress={self.host}\n"
                      f"clientPort={self.port}\nadmin.enableServer=false\n"
                      "4lw.commands.whitelist=ruok,srvr,mntr\nmaxSessionTimeout=20000\n")
        return path

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while four_letter_word(self.port, "ruok", host=self.host) != "imok":
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; "
                                   f"see {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper not ready after {timeout_s}s")
            time.sleep(0.05)

    def kill(self) -> None:
        """kill -9 of the whole group; the data dir stays for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> "ZooKeeperServer":
        self.kill()
        return self.start()

    def pause(self) -> None:
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)   # a paused JVM cannot take SIGTERM
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None


def main() -> int:
    """`python3 -m tools.testing.zookeeper_server --dir D [--port P]`: one ZooKeeper in the
    foreground until Ctrl-C, for trying a cluster on one machine (docs/CLUSTER.md)."""
    import argparse
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--dir", required=True, help="its data and log directory")
    parser.add_argument("--port", type=int, default=2181, help="the client port")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    server = ZooKeeperServer(args.dir, args.port).start()
    print(f"ZooKeeper on {server.connect} (Ctrl-C stops it)", flush=True)
    try:
        while server.proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
