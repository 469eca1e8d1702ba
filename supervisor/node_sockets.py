"""The supervisor's sockets: the HTTP listening socket its gateways accept on (passed down
by fd), the control ROUTER and the events PUB on ipc, and the ZeroMQ front (TCP for
clients, a CURVE server when client keys are set; its ipc twin for the node's own
processes), which the front relay's thread serves once it starts.

Binding checks first and fails loud: bad keys or limits, a public host without keys, a
port in use (CannotListen, one line naming what could not listen where).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import tempfile

import orjson
import xxhash
import zmq

from topics_actors import server_keys
from topics_actors.client_keys import ClientKeyRing, client_keys_from_env
from topics_actors.config import NodeConfig, NodeWiring
from topics_actors.curve_auth import CurveAuth, identity_of
from topics_actors.errors import CannotListen
from topics_actors.gateway.gateway_settings import GatewaySettings
from .front_core import FrontCore
from .front_relay import FrontRelay

log = logging.getLogger(__name__)

HTTP_BACKLOG = 1024
_IPC_PATH_MAX = 100


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_dir_for(data_dir: str) -> str:
    """Where the node's ipc:// sockets live (AF_UNIX paths are short)."""
    preferred = os.path.join(os.path.abspath(data_dir), "run")
    if len(preferred) + 20 < _IPC_PATH_MAX:
        return preferred
    digest = xxhash.xxh3_64_hexdigest(os.path.abspath(data_dir).encode())
    return os.path.join(tempfile.gettempdir(), f"topics-run-{digest}")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def listen_http(host: str, port: int) -> socket.socket:
    """The HTTP listening socket every gateway process accepts on (passed down by fd)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=HTTP_BACKLOG)
    # Accepted connections inherit it: an SSE event is a small write, and Nagle would hold
    # it until the client's delayed ACK of the previous one (up to 40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def listening(what: str, address: str, bind):
    """bind(), or CannotListen naming `what` and `address` (a port in use is the usual
    cause: say so in one line, not with a traceback)."""
    try:
        return bind()
    except (OSError, zmq.ZMQError) as error:
        raise CannotListen(f"cannot listen for {what} on {address}: "
                           f"{getattr(error, 'strerror', None) or error}") from None


def write_port_file(path: str, ports: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(orjson.dumps(ports))
    os.replace(tmp, path)


class NodeSockets:
    """What the supervisor listens on (module docstring); `close` closes all of it."""

    def __init__(self, config: NodeConfig):
        self.config = config
        self.ctx: zmq.Context | None = None
        self.sockets: list[zmq.Socket] = []     # closed at the end, whatever got bound
        self.zmq_port = 0
        self.http_port = 0
        self.http_sock: socket.socket | None = None
        self.relay: FrontRelay | None = None
        self.client_keys = ClientKeyRing()
        self.curve: CurveAuth | None = None

    def check_bind(self) -> str | None:
        """Fail loud before anything starts: bad TOPICS_API_KEYS, TOPICS_ZMQ_CLIENT_KEYS or
        limits, or a non-loopback host without keys (unless TOPICS_ALLOW_INSECURE_NO_AUTH):
        without HTTP keys, exit 1 here; without client keys, the reason to refuse (exit 2)."""
        settings = GatewaySettings.from_env()
        loopback = is_loopback(self.config.host)
        settings.check_bind(self.config.host, loopback)
        self.client_keys = client_keys_from_env()
        if loopback or self.client_keys.enabled or settings.allow_insecure_no_auth:
            return None
        return (f"refusing to serve ZeroMQ clients on non-loopback host {self.config.host!r} "
                f"in plaintext; set TOPICS_ZMQ_CLIENT_KEYS (CURVE), or "
                f"TOPICS_ALLOW_INSECURE_NO_AUTH=1 to accept the risk")

    def bind(self, started_ms: int) -> NodeWiring:
        """Bind every socket; the wiring the children are given to reach them."""
        cfg = self.config
        self.run_dir = run_dir_for(cfg.data_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        if cfg.gateway_workers:
            self.http_sock = listening("HTTP (TOPICS_PORT)", f"{cfg.host}:{cfg.http_port}",
                                       lambda: listen_http(cfg.host, cfg.http_port))
            self.http_port = self.http_sock.getsockname()[1]
        else:
            self.http_port = cfg.http_port or _free_port(cfg.host)
        self.ctx = zmq.Context(io_threads=1)
        self.control = self._socket(zmq.ROUTER)
        control_endpoint = f"ipc://{self.run_dir}/control.sock"
        self.control.bind(control_endpoint)
        self.events = self._socket(zmq.PUB)
        self.events.bind(f"ipc://{self.run_dir}/events.sock")
        self._bind_front()
        return NodeWiring(control_endpoint, self.local_front, self.zmq_port, self.run_dir,
                          os.getpid(), started_ms,
                          cfg.data_dir if self.curve and cfg.zk else None)

    def _bind_front(self) -> None:
        """The front: TCP for clients (a CURVE server when client keys are set, the key
        pair in the data dir), and ipc (0600) for the node's own processes."""
        cfg = self.config
        self.front = self._socket(zmq.ROUTER)
        self.front.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if self.client_keys.enabled:
            self.curve = CurveAuth(self.ctx, self.client_keys,
                                   server_keys.load_or_create(cfg.data_dir))
            self.curve.serve(self.front)
        self._bind_front_tcp()
        self.local = self._socket(zmq.ROUTER)
        self.local.setsockopt(zmq.ROUTER_MANDATORY, 1)
        path = os.path.join(self.run_dir, "front.sock")
        self.local_front = f"ipc://{path}"
        self.local.bind(self.local_front)
        os.chmod(path, 0o600)
        authorize = self._authorize if self.client_keys.enabled else None
        self.relay = FrontRelay(self.ctx, self.front, FrontCore(authorize=authorize),
                                identity_of if self.curve else None, self.local)

    def _bind_front_tcp(self) -> None:
        """TOPICS_ZMQ_PORT when set (taken: refuse to start); else the HTTP port + 1, and
        when that one is taken any free port, published like any other (health's
        `zmq_port`, the `event=listening` line, TOPICS_PORT_FILE): the user never asked
        for HTTP port + 1, so a stranger holding it must not stop the node."""
        cfg = self.config
        front = f"tcp://{cfg.host}:{cfg.front_port()}"
        try:
            listening("the ZeroMQ front (TOPICS_ZMQ_PORT)", front,
                      lambda: self.front.bind(front))
        except CannotListen as error:
            if cfg.zmq_port is not None or not cfg.http_port:
                raise
            log.warning("event=zmq_port_fallback wanted=%d reason=%r", cfg.front_port(),
                        error.message)
            self.front.bind(f"tcp://{cfg.host}:0")
        self.zmq_port = int(self.front.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])

    def _authorize(self, identity: str | None, msg) -> None:
        """The front's check of a request under CURVE: another node of the cluster (a
        gateway forwarding to this node's topics) is trusted like our own processes."""
        if identity not in self.curve.peers:
            self.client_keys.authorize(identity, msg)

    def _socket(self, kind: int) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        self.sockets.append(sock)
        return sock

    def start_relay(self, shard_map: dict) -> None:
        """From here on the front sockets belong to the relay's thread (which closes them)."""
        self.relay.publish_map(shard_map)
        self.sockets.remove(self.front)
        self.sockets.remove(self.local)
        self.relay.start()

    def close(self) -> None:
        if self.relay is not None:
            self.relay.stop()
        if self.curve is not None:
            self.curve.stop()
        if self.ctx is not None:
            for sock in self.sockets:
                sock.close(0)
            self.ctx.term()
        if self.http_sock is not None:
            self.http_sock.close()
