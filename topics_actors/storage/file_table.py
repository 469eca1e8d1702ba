"""Read access to record frames by location, without keeping payloads in Python memory.

A location is one u64: file number << 40 | byte offset. WAL files are memory-mapped and
served from the page cache; an ephemeral topic's frames live in a RAM buffer registered here
under its own file number. Location 0 means "no record" (a hole).
"""

from __future__ import annotations

import mmap
from typing import NamedTuple

from topics_actors.record_envelope import build as build_envelope
from topics_actors.storage import batch_frame
from topics_actors.storage.frame import APPEND_BATCH, HEADER, HEADER_BYTES
from topics_actors.storage.fs import Fs

OFFSET_BITS = 40
OFFSET_MASK = (1 << OFFSET_BITS) - 1


class StoredRecord(NamedTuple):
    seq: int
    ts: int
    envelope: bytes
    tag: str | None
    node: str | None
    flags: int


def make_loc(file_no: int, offset: int) -> int:
    return (file_no << OFFSET_BITS) | offset


class FileTable:
    def __init__(self, fs: Fs):
        self.fs = fs
        self._paths: dict[int, str] = {}
        self._views: dict[int, object] = {}
        self._next_no = 1

    def add_path(self, path: str, view=None) -> int:
        file_no = self._next_no
        self._next_no += 1
        self._paths[file_no] = path
        if view is not None:
            self._views[file_no] = view
        return file_no

    def add_buffer(self, buf: bytearray | bytes, file_no: int = 0) -> int:
        """Register an in-memory buffer of frames; with `file_no`, in place of that one's
        (the same frames, held by another object)."""
        if not file_no:
            file_no = self._next_no
            self._next_no += 1
        self._views[file_no] = buf
        return file_no

    def remap(self, file_no: int) -> None:
        """Forget a file's mapping (after truncation or growth); it is mapped again on use."""
        view = self._views.pop(file_no, None)
        if isinstance(view, mmap.mmap):
            view.close()

    def remove(self, file_no: int) -> None:
        self.remap(file_no)
        self._paths.pop(file_no, None)

    def _view(self, file_no: int, end: int):
        view = self._views.get(file_no)
        if view is None or len(view) < end:
            self.remap(file_no)
            view = self.fs.map_read(self._paths[file_no])
            self._views[file_no] = view
        return view

    def path(self, file_no: int) -> str:
        return self._paths[file_no]

    def view(self, file_no: int, end: int = 0):
        """The file's bytes, mapped at least up to `end`."""
        return self._view(file_no, end)

    def header(self, loc: int) -> tuple:
        """(frame_len, type, flags, topic_id, seq, ts, node_len, tag_len, data_len)."""
        offset = loc & OFFSET_MASK
        return HEADER.unpack_from(self._view(loc >> OFFSET_BITS, offset + HEADER_BYTES), offset)

    def read(self, loc: int, seq: int) -> StoredRecord:
        """The record `seq` at `loc`: its Append frame's, or its place in an AppendBatch
        (the batch's frame is the location of each of its records)."""
        file_no, offset = loc >> OFFSET_BITS, loc & OFFSET_MASK
        view = self._view(file_no, offset + HEADER_BYTES)
        (frame_len, ftype, flags, _, first, ts,
         node_len, tag_len, data_len) = HEADER.unpack_from(view, offset)
        if len(view) < offset + 4 + frame_len:
            view = self._view(file_no, offset + 4 + frame_len)
        pos = offset + HEADER_BYTES
        node = view[pos:pos + node_len].decode() if node_len else None
        if ftype == APPEND_BATCH:
            start, end = batch_frame.text_span(view, pos + node_len, seq - first)
            return StoredRecord(seq, ts, build_envelope(view[start:end], None), None, node,
                                flags)
        pos += node_len
        tag = view[pos:pos + tag_len].decode() if tag_len else None
        pos += tag_len
        return StoredRecord(first, ts, bytes(view[pos:pos + data_len]), tag, node, flags)

    def close(self) -> None:
        for file_no in list(self._views):
            self.remap(file_no)
