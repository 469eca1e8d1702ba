"""The Fs seam (topics_actors/storage/fs.py): the protocols the engine codes against describe
RealFs exactly, and the test wrappers of tools/testing satisfy them, so a FaultFs or CrashFs
can stand wherever the engine takes an Fs."""

from __future__ import annotations

import inspect

import pytest

from tools.testing.crash_fs import CrashFs
from tools.testing.fault_fs import FaultFs
from topics_actors.storage.fs import File, Fs, FsFile, RealFs


def public_members(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def protocol_members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_the_protocols_name_every_call_of_the_real_fs():
    assert protocol_members(Fs) == public_members(RealFs) - {"file_class"}
    assert protocol_members(FsFile) == public_members(File) | {"path", "fd"}


@pytest.mark.parametrize("make", [lambda tmp: RealFs(), lambda tmp: FaultFs(),
                                  lambda tmp: CrashFs(grave=str(tmp / "grave"))])
def test_every_fs_and_its_files_satisfy_the_protocols(tmp_path, make):
    fs = make(tmp_path)
    assert isinstance(fs, Fs)
    for handle in (fs.open(str(tmp_path / "f"), create=True), fs.open_read(str(tmp_path / "f"))):
        try:
            assert isinstance(handle, FsFile)
            assert handle.path == str(tmp_path / "f") and handle.fd >= 0
        finally:
            handle.close()
