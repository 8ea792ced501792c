"""Reading a shipped checkpoint: resolve the file, read its bytes, verify them against the manifest beside it.

A checkpoint ``NAME.pt`` may have a manifest ``NAME.json`` holding the sha256 of the bytes; when it does,
the bytes must match. Used by the MAT agent and the Tianshou integration (the trainer side writes with
:func:`core_env.npz.write_atomic`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def read_verified(path: Path | str, default_file: str, missing: str) -> tuple[Path, bytes, dict[str, Any]]:
    """(file, bytes, manifest) of a checkpoint; ``path`` may be a run directory holding ``default_file``.

    Raises:
        ValueError: ``missing`` (with the path) when there is no file; "checksum mismatch ..." when the
            manifest's sha256 differs from the file's.
    """
    path = Path(path)
    if path.is_dir():
        path = path / default_file
    if not path.exists():
        raise ValueError(f"{missing}: {path}")
    data = path.read_bytes()
    manifest_path = path.with_suffix(".json")
    manifest: dict[str, Any] = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if manifest_path.exists():
        actual = hashlib.sha256(data).hexdigest()
        if manifest.get("sha256") != actual:
            raise ValueError(f"checksum mismatch for checkpoint {path}: {manifest_path.name} says sha256 {manifest.get('sha256')}, file has {actual}")
    return path, data, manifest
