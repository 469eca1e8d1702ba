"""protocol/packer.py: the kept per-thread Packer packs as msgpack.packb does, is not kept
after a large message, and is not shared between threads."""

from __future__ import annotations

import threading

import msgpack
import pytest

from topics_actors.protocol import packer


@pytest.mark.parametrize("obj", [[3, "reply", 7, {"a": b"\x00\xff", "b": [1, None, True]}],
                                 {"s": "é" * 300, "n": -(2**63)}, [], 2**64 - 1])
def test_pack_is_packb(obj):
    assert packer.pack(obj) == msgpack.packb(obj, use_bin_type=True)
    assert packer.pack(obj) == msgpack.packb(obj, use_bin_type=True)   # reused: same bytes


def test_a_packer_that_packed_a_large_message_is_not_kept():
    packer.pack([1])
    kept = packer._LOCAL.packer
    packer.pack([1])
    assert packer._LOCAL.packer is kept
    big = b"x" * (packer.KEEP_BYTES_MAX + 1)
    assert msgpack.unpackb(packer.pack([big])) == [big]
    assert getattr(packer._LOCAL, "packer", None) is None
    assert packer.pack([2]) == msgpack.packb([2])


def test_a_failed_pack_leaves_the_packer_clean():
    with pytest.raises(TypeError):
        packer.pack([1, object()])
    assert packer.pack([5]) == msgpack.packb([5])


def test_each_thread_has_its_own_packer():
    packer.pack(0)
    seen = []
    thread = threading.Thread(target=lambda: (packer.pack(0), seen.append(packer._LOCAL.packer)))
    thread.start()
    thread.join(10)
    assert seen and seen[0] is not packer._LOCAL.packer
