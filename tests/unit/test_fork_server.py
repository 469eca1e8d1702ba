"""The fork server (supervisor/fork_server.py): a child forked from it runs the module's
main() with its arguments, is re-parented to the process that asked (so waited for and
signalled like a Popen child), keeps the descriptors it was sent under their numbers and no
others, shows its command line as its title, and the server goes when closed. The modules
to preload are imported by the caller, before the fork, and frozen out of the collector.

Run in a subprocess: the server makes its caller a child subreaper, which a test process
should not become."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent('''
    import os, sys, time

    def main(argv):
        fd, stray = int(argv[0]), int(argv[1])
        try:
            os.fstat(stray)
            stray_open = True
        except OSError:
            stray_open = False
        cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
        os.write(fd, repr((os.getppid(), stray_open, "fork_child" in cmdline)).encode())
        if argv[2] == "sleep":
            time.sleep(60)
        return int(argv[2]) if argv[2].isdigit() else 0
''')

DRIVER = textwrap.dedent('''
    import json, os, signal, sys
    from supervisor.fork_server import ForkServer

    import gc
    forks = ForkServer(preload=("fork_child",))
    assert "fork_child" not in sys.modules and gc.get_freeze_count() == 0
    assert forks.start()
    out = {"server_alive": True, "preloaded_here": "fork_child" in sys.modules,
           "frozen": gc.get_freeze_count() > 1000}

    def pipe_child(*args):
        read_end, write_end = os.pipe()
        os.dup2(write_end, 200)              # a number the server's descriptors do not have
        os.close(write_end)
        stray_r, stray_w = os.pipe()         # open here, not sent: closed in the child
        child = forks.spawn([sys.executable, "-m", "fork_child", "200", str(stray_w), *args],
                            (200,))
        os.close(200)                        # so a child that died unheard reads as EOF
        return child, read_end

    child, read_end = pipe_child("3")
    out["code"] = child.wait(20)
    out["report"] = os.read(read_end, 200).decode()
    out["me"] = os.getpid()
    sleeper, read_end = pipe_child("sleep")
    os.read(read_end, 200)
    sleeper.send_signal(signal.SIGTERM)
    out["signalled"] = sleeper.wait(20)
    server = forks.pid
    forks.close()
    try:
        os.kill(server, 0)
    except ProcessLookupError:
        out["server_alive"] = False
    out["after_close"] = forks.spawn([sys.executable, "-m", "fork_child"], ()) is None
    print(json.dumps(out))
''')


def test_a_forked_child_is_the_callers_runs_main_and_keeps_only_its_fds(tmp_path):
    (tmp_path / "fork_child.py").write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, str(tmp_path)]))
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True,
                          text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    parent, stray_open, titled = ast.literal_eval(out["report"])
    assert out["preloaded_here"] and out["frozen"]   # imported by the caller, before the fork
    assert out["code"] == 3 and parent == out["me"] and not stray_open
    assert titled or importlib.util.find_spec("setproctitle") is None
    assert out["signalled"] == -15
    assert not out["server_alive"] and out["after_close"]


# Needed only by a connection that asks for them (HTTP/2, a WebSocket), by a client given an
# http:// URL, by CURVE keys, a profile or a malformed command line: imported where used, so
# they stay out of the image every process of a node shares (docs/OPERATIONS.md 17).
ON_USE_ONLY = ("h2", "websockets", "http.client", "email", "zmq.auth.thread", "cProfile",
               "argparse")


def test_the_image_children_are_forked_from_leaves_out_what_is_used_on_demand():
    from supervisor.fork_server import PRELOAD
    script = ("import json, sys, importlib\nimport supervisor.cli, supervisor.node\n"
              f"for module in {PRELOAD!r}:\n    importlib.import_module(module)\n"
              f"print(json.dumps([m for m in {ON_USE_ONLY!r} if m in sys.modules]))")
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


POOL_BYTES = 16 * 1024


def test_the_images_free_small_blocks_are_filled_before_the_fork():
    script = ("import json, supervisor.cli, supervisor.node\n"
              "from supervisor.fork_server import _allocator_report, fill_free_blocks, "
              "free_blocks\n"
              "before = free_blocks(_allocator_report())\n"
              "filled = fill_free_blocks()\n"
              "after = free_blocks(_allocator_report())\n"
              "print(json.dumps([sum(n for _, n in before), filled, after, "
              "[s for s, _ in before]]))")
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    before, filled, after, sizes = json.loads(done.stdout)
    assert before > 1000 and filled > before * 0.9   # an image that imported much has holes
    # What is left is the unused end of a pool the filling opened, at most one per class
    # (a pool is 16 KiB): no holes among other objects.
    assert all(free < POOL_BYTES // size for size, free in after)
    assert min(sizes) >= 48 and max(sizes) <= 512
