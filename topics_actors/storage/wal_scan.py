"""Reading WAL files: a scan stops at the first invalid frame, which is the log's end."""

from __future__ import annotations

from collections.abc import Iterator

from topics_actors.storage.frame import HEADER, FRAME_LEN_MIN, Frame, decode_at
from topics_actors.storage.fs import Fs


class FileScan:
    """One pass over a WAL file. After `frames()` is exhausted, `valid_len` is the end of the
    last valid frame and `end_reason` says why the scan stopped."""

    def __init__(self, fs: Fs, path: str):
        self.path = path
        self.view = fs.map_read(path)
        self.size = len(self.view)
        self.valid_len = 0
        self.end_reason = ""

    def frames(self) -> Iterator[Frame]:
        view, size, offset = self.view, self.size, 0
        while True:
            frame = decode_at(view, offset, size)
            if frame is None:
                self.end_reason = describe_end(view, offset, size)
                return
            offset += frame.size
            self.valid_len = offset
            yield frame

    def close(self) -> None:
        close = getattr(self.view, "close", None)
        if close is not None:
            close()


def describe_end(view, offset: int, size: int) -> str:
    """Why a scan stopped at `offset`: `eof`, `zeros` (a clean end in preallocated space)
    or `torn: <reason>` for bytes that look like a damaged frame."""
    if offset >= size:
        return "eof"
    if offset + 4 > size:
        return "torn: partial length prefix"
    frame_len = int.from_bytes(view[offset:offset + 4], "little")
    if frame_len == 0:
        tail = bytes(view[offset:min(size, offset + 4096)])
        return "zeros" if not tail.strip(b"\x00") else "torn: zero length before data"
    if frame_len < FRAME_LEN_MIN:
        return f"torn: frame_len {frame_len} below minimum"
    if offset + 4 + frame_len > size:
        return f"torn: frame_len {frame_len} overruns the file"
    if offset + HEADER.size > size:
        return "torn: partial header"
    fields = HEADER.unpack_from(view, offset)
    if 42 + fields[6] + fields[7] + fields[8] != frame_len:
        return "torn: section lengths do not match frame_len"
    return "torn: checksum mismatch, unknown type, bad UTF-8 or bad body"


_ZEROS = bytes(1 << 20)


def zeros_from(view, start: int) -> bool:
    """Whether every byte of `view` from `start` on is zero (a clean preallocated end)."""
    for offset in range(start, len(view), len(_ZEROS)):
        chunk = view[offset:offset + len(_ZEROS)]
        if chunk != _ZEROS[:len(chunk)]:
            return False
    return True
