"""Network namespaces on one bridge, for partitions that cut real TCP links.

A NetLab makes a hub namespace holding a bridge, and one namespace per member (each node,
ZooKeeper, the clients), joined to the bridge by a veth pair: the member sees `eth0` with
its own address on a private /24 and nothing else. Every namespace is the lab's own, named
`<prefix>-<member>`, so nothing a test sends leaves them and two labs never meet; the host's
namespace is not on the bridge. Faults are rules of the lab, re-rendered whole and applied
atomically per member:

- `block(src, dst)`: packets from src to dst are dropped (nftables, in src's output hook
  and dst's input hook); block both ways for a cut link, one way for an asymmetric one;
- `set_loss(member, percent)`: that share of its packets to the lab dropped at random
  (nftables numgen), both ways;
- `set_slow(member, delay_ms, rate_kbit)`: tc netem delay when the kernel has sch_netem,
  else a token-bucket rate limit (tbf), whose queue delays a busy link instead;
- `heal()`: no rule left.

Needs root, iproute2 (`ip`, `tc`), nftables (`nft`) and util-linux (`nsenter`); the
Debian packages come from tools/install_services.sh. `usable()` says why not.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

SUBNET = "10.99.0"          # private to the lab's namespaces: two labs never share one
CLONE_NEWNET = 0x40000000
TABLE = "jepsen"
COMMAND_TIMEOUT_S = 10


def usable() -> str | None:
    """Why a NetLab cannot be built here (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc", "nft", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (tools/install_services.sh installs them)"
    return None


def netem_available() -> bool:
    """Whether the kernel has sch_netem (tc delay); probed once on a scratch namespace."""
    name = f"netem-probe-{os.getpid()}"
    try:
        _run(["ip", "netns", "add", name])
        return subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo",
                               "root", "netem", "delay", "1ms"], capture_output=True,
                              timeout=COMMAND_TIMEOUT_S).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _run(argv: list[str], stdin: str | None = None) -> None:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


class NetLab:
    def __init__(self, prefix: str, members: list[str]):
        self.prefix = prefix
        self.members = list(members)
        self.addresses = {name: f"{SUBNET}.{i + 10}" for i, name in enumerate(self.members)}
        self.blocked: set[tuple[str, str]] = set()
        self.loss: dict[str, int] = {}
        self.slow: dict[str, tuple[int, int]] = {}
        self.netem = False
        self.made: list[str] = []

    def ns(self, member: str) -> str:
        return f"{self.prefix}-{member}"

    def address(self, member: str) -> str:
        return self.addresses[member]

    def enter_argv(self, member: str) -> list[str]:
        """A command prefix that runs a program inside the member's namespace (the
        program's pid is the one Popen gives: nsenter execs it)."""
        return ["nsenter", f"--net=/run/netns/{self.ns(member)}", "--"]

    # --- building and tearing down ---------------------------------------------------------

    def create(self) -> "NetLab":
        reason = usable()
        if reason:
            raise RuntimeError(reason)
        self.netem = netem_available()
        hub = self.ns("hub")
        try:
            self._add_ns(hub)
            _run(["ip", "-n", hub, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", hub, "link", "set", "br0", "up"])
            for i, member in enumerate(self.members):
                self._add_member(member, f"v{i}")
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_ns(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self.made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _add_member(self, member: str, port: str) -> None:
        ns, hub = self.ns(member), self.ns("hub")
        self._add_ns(ns)
        _run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port,
              "netns", hub])
        _run(["ip", "-n", hub, "link", "set", port, "master", "br0", "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{self.address(member)}/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        self._apply_rules(member)

    def destroy(self) -> None:
        """Delete every namespace the lab made (their veths and rules go with them)."""
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.made.clear()

    def enter(self, member: str) -> None:
        """Move the calling thread into the member's namespace; threads it starts later
        inherit it. Call it before any other thread exists (a client's I/O threads must
        be born inside)."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{self.ns(member)}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns into {self.ns(member)}: {os.strerror(errno)}")
        finally:
            os.close(fd)

    # --- faults ------------------------------------------------------------------------

    def block(self, src: str, dst: str) -> None:
        self.blocked.add((src, dst))
        self._apply_rules(src, dst)

    def cut(self, a: str, b: str) -> None:
        """Both ways."""
        self.blocked |= {(a, b), (b, a)}
        self._apply_rules(a, b)

    def isolate(self, member: str, keep: tuple[str, ...] = ()) -> None:
        """Cut `member` from every other member but `keep`."""
        for other in self.members:
            if other != member and other not in keep:
                self.blocked |= {(member, other), (other, member)}
        self._apply_rules(*self.members)

    def set_loss(self, member: str, percent: int) -> None:
        self.loss[member] = percent
        self._apply_rules(member)

    def set_slow(self, member: str, delay_ms: int, rate_kbit: int) -> None:
        ns = self.ns(member)
        if self.netem:
            qdisc = ["netem", "delay", f"{delay_ms}ms", f"{max(1, delay_ms // 4)}ms"]
        else:
            qdisc = ["tbf", "rate", f"{rate_kbit}kbit", "burst", "16kb", "latency",
                     f"{max(delay_ms, 10)}ms"]
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root",
              *qdisc])
        self.slow[member] = (delay_ms, rate_kbit)

    def heal(self) -> None:
        touched = {m for pair in self.blocked for m in pair} | set(self.loss)
        self.blocked.clear()
        self.loss.clear()
        self._apply_rules(*touched)
        for member in list(self.slow):
            subprocess.run(["ip", "netns", "exec", self.ns(member), "tc", "qdisc", "del",
                            "dev", "eth0", "root"], capture_output=True)
            del self.slow[member]

    def describe(self) -> str:
        cuts = sorted(f"{a}->{b}" for a, b in self.blocked)
        extra = [f"{m} loss {p}%" for m, p in sorted(self.loss.items())]
        extra += [f"{m} slow" for m in sorted(self.slow)]
        return ", ".join(cuts + extra) or "healed"

    def _apply_rules(self, *members: str) -> None:
        for member in set(members):
            _run(["ip", "netns", "exec", self.ns(member), "nft", "-f", "-"],
                 stdin=self._ruleset(member))

    def _ruleset(self, member: str) -> str:
        """The member's whole table, replaced in one nft transaction."""
        to = sorted(self.address(d) for s, d in self.blocked if s == member)
        came = sorted(self.address(s) for s, d in self.blocked if d == member)
        out_rules, in_rules = [], []
        if to:
            out_rules.append(f"ip daddr {{ {', '.join(to)} }} drop")
        if came:
            in_rules.append(f"ip saddr {{ {', '.join(came)} }} drop")
        if self.loss.get(member):
            share = self.loss[member]
            out_rules.append(f"ip daddr {SUBNET}.0/24 numgen random mod 100 < {share} drop")
            in_rules.append(f"ip saddr {SUBNET}.0/24 numgen random mod 100 < {share} drop")
        chains = "".join(
            f"  chain {name} {{ type filter hook {name} priority 0; policy accept;\n"
            + "".join(f"    {rule}\n" for rule in rules) + "  }\n"
            for name, rules in (("output", out_rules), ("input", in_rules)))
        return (f"add table inet {TABLE}\ndelete table inet {TABLE}\n"
                f"table inet {TABLE} {{\n{chains}}}\n")
