"""The node's CURVE key pair, kept in the data directory: `curve/server.public` (Z85, mode
0644, what clients are given) and `curve/server.secret` (Z85, mode 0600). The supervisor
creates the pair at the first start with client keys configured and every later start
reuses it, so clients keep one server key across restarts. The secret is never logged and
never passed on a command line: each process reads the file.
"""

from __future__ import annotations

import dataclasses
import os

import zmq

KEY_DIR = "curve"
PUBLIC_FILE = "server.public"
SECRET_FILE = "server.secret"


@dataclasses.dataclass(frozen=True)
class ServerKeys:
    public: bytes           # Z85
    secret: bytes = dataclasses.field(repr=False)


def _write(path: str, data: bytes, mode: int) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)      # the umask could have narrowed it; never widened
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        key = handle.read().strip()
    if len(key) != 40:
        raise SystemExit(f"{path} does not hold a Z85 CURVE key (40 characters)")
    return key


def load(data_dir: str) -> ServerKeys:
    folder = os.path.join(data_dir, KEY_DIR)
    return ServerKeys(_read(os.path.join(folder, PUBLIC_FILE)),
                      _read(os.path.join(folder, SECRET_FILE)))


def load_or_create(data_dir: str) -> ServerKeys:
    """The pair in `data_dir`, created (secret first, then public, each written whole
    through a rename) when the public file is missing."""
    folder = os.path.join(data_dir, KEY_DIR)
    if not os.path.exists(os.path.join(folder, PUBLIC_FILE)):
        os.makedirs(folder, mode=0o700, exist_ok=True)
        public, secret = zmq.curve_keypair()
        _write(os.path.join(folder, SECRET_FILE), secret + b"\n", 0o600)
        _write(os.path.join(folder, PUBLIC_FILE), public + b"\n", 0o644)
    return load(data_dir)
