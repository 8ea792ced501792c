"""Byte-reproducible ``.npz`` files and atomic writes, shared by suites, corpus and generator shards.

Numpy's own ``savez`` stamps the current time into the zip, so identical arrays give different bytes;
here every member gets a fixed timestamp and members are sorted by name, so the same arrays always give
the same bytes (and the same sha256). Writes go to a temporary file that is renamed into place, so an
interruption never leaves a half-written file.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
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


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> str:
    """Write ``arrays`` as a byte-reproducible ``.npz`` at ``path``; return its sha256."""
    data = npz_bytes(arrays)
    write_atomic(Path(path), data)
    return hashlib.sha256(data).hexdigest()
