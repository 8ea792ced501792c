"""Keeps numba's on-disk cache of the compiled step from outliving the rules it was compiled from.

Numba keys each cached function on its own source file only (``cache=True``): when ``dynamics.py`` or
``features.py`` changes, the functions of ``sim.py`` that call them, and every function that froze a
constant imported from another module (``curves.LOSS_FLOOR``, …), would keep running the old machine code.
:func:`guard` runs before anything is compiled (``core_env.jit`` calls it on import, before any compiled module): it hashes every
source the compiled code is built from (:data:`SOURCES`: the compiled modules and the core_env modules they
import) and, when the digest differs from the one stamped beside the cache, deletes the cached machine code
of the compiled modules (``*.nbi``/``*.nbc``) and stamps the new digest, so the next call recompiles.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
#: Modules with ``@njit(cache=True)`` functions.
COMPILED = ("rules", "dynamics", "features", "sim")
#: Every source file the compiled code depends on, relative to the package: the compiled modules and the
#: core_env modules they import (a test checks the list against their imports).
SOURCES = (*(f"{name}.py" for name in COMPILED), "jit.py", "state.py", "curves/__init__.py", "curves/bank.py",  # LOSS_FLOOR lives in bank.py
           "config.py", "task_source.py", "workload.py")
STAMP = "compiled_rules.sha256"


def sources_digest(package: Path = PACKAGE, sources: tuple[str, ...] = SOURCES) -> str:
    """sha256 over the bytes of ``package/<source>`` for every file in ``sources``, in order."""
    digest = hashlib.sha256()
    for name in sources:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    return digest.hexdigest()


def cache_dirs(package: Path = PACKAGE) -> list[Path]:
    """Where numba keeps the package's cache: ``__pycache__`` beside the modules, and under ``NUMBA_CACHE_DIR`` when set."""
    dirs = [package / "__pycache__"]
    custom = os.environ.get("NUMBA_CACHE_DIR")
    if custom:
        dirs += [p for p in Path(custom).rglob("*") if p.is_dir() and p.name == package.name]
    return dirs


def guard(package: Path = PACKAGE, sources: tuple[str, ...] = SOURCES, compiled: tuple[str, ...] = COMPILED) -> int:
    """Delete the compiled modules' cached machine code when the sources changed since it was stamped;
    returns the number of files deleted (0 when the cache is current or absent)."""
    digest = sources_digest(package, sources)
    removed = 0
    for directory in cache_dirs(package):
        stamp = directory / STAMP
        try:
            if stamp.read_text().strip() == digest:
                continue
        except OSError:
            pass
        for path in directory.glob("*.nb[ic]"):
            if path.name.split(".", 1)[0] in compiled:
                try:
                    path.unlink()
                    removed += 1
                except OSError:  # another process removed it first, or the cache is read-only
                    pass
        try:
            directory.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest + "\n")
        except OSError:  # a read-only install: numba then caches elsewhere or not at all
            pass
    return removed
