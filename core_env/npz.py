"""Byte-reproducible ``.npz`` files, and :func:`write_atomic`, the one atomic file write of the three packages.

Numpy's own ``savez`` stamps the current time into the zip, so identical arrays give different bytes;
here every member gets a fixed timestamp and members are sorted by name, so the same arrays always give
the same bytes (and the same sha256). Writes go to a temporary file that is renamed into place, so an
interruption never leaves a half-written file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """The deflated ``.npz`` bytes of ``arrays`` (members sorted, fixed timestamps, no pickles)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, member.getvalue())
    return buffer.getvalue()


def read_npz(path: Path | str, allow_pickle: bool = False) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` file ``path``, each member's header checked against the member's size
    before anything is allocated (a header may not declare more data than the file holds).

    Raises:
        ValueError: naming the file (and the member) when it is not a zip archive, a member is not an
            ``.npy`` array, a header declares a shape its member cannot hold, or a member fails its CRC.
    """
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a NumPy .npz archive ({type(exc).__name__}: {exc})") from None
    out: dict[str, np.ndarray] = {}
    with archive:
        for info in archive.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            try:
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                    shape, _, dtype = read_header(member)  # the header only: nothing allocated yet
                    header = member.tell() if member.seekable() else None
                    count = int(np.prod(shape, dtype=object))
                    if dtype.hasobject:
                        if not allow_pickle:
                            raise ValueError("an object array (a pickle, which can run code when loaded); not read")
                    elif header is not None and count * dtype.itemsize > info.file_size - header:
                        raise ValueError(f"its header declares {shape} {dtype} ({count * dtype.itemsize:,} bytes), "
                                         f"the member holds {info.file_size - header:,}")
                with archive.open(info) as member:
                    out[name] = np.lib.format.read_array(member, allow_pickle=allow_pickle)
            except (ValueError, zipfile.BadZipFile, OSError, EOFError) as exc:
                raise ValueError(f"{path}: member {info.filename!r} cannot be read as an array: {exc}") from None
    return out


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` (text is written as UTF-8) to ``path`` through a temporary file beside it
    (``NAME.tmp-PID-THREAD``), flushed to disk and renamed into place: a reader sees the old file or the
    new one, never a half-written one, and a failed write leaves no temporary file. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write ``arrays`` as a byte-reproducible ``.npz`` at ``path``; return its sha256."""
    data = npz_bytes(arrays)
    write_atomic(Path(path), data)
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) held back until the block is over, so a message goes through a pipe whole or a file and its
    manifest are both written: in the main
    thread, SIGINT's handler is swapped for one that notes the press, and the press is raised again after."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:  # no Python handler to swap
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: pressed.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pressed:
            signal.raise_signal(signal.SIGINT)
