"""Reading a shipped checkpoint: resolve the file, read its bytes, verify them against the manifest beside it.

A checkpoint ``NAME.pt`` must have a manifest ``NAME.json`` (a JSON object) holding the sha256 of the
bytes, and the bytes must match it: a checkpoint without a readable manifest is refused, never loaded
unverified. The writers (:func:`mara_agents.mat.agent.save_policy`,
:func:`mara_agents.integrations.tianshou_ppo.save_checkpoint`) always write both, atomically with
:func:`core_env.npz.write_atomic`. Used by the MAT agent and the Tianshou integration, which check the
manifest's other fields themselves.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def read_verified(path: Path | str, default_file: str, missing: str) -> tuple[Path, bytes, dict[str, Any]]:
    """(file, bytes, manifest) of a checkpoint; ``path`` may be a run directory holding ``default_file``.

    Raises:
        ValueError: ``missing`` (with the path) when there is no file; "manifest ... is missing" when
            there is no ``NAME.json`` beside it, "... is not a JSON object" when it cannot be read as one;
            "checksum mismatch ..." when the manifest's sha256 differs from the file's.
    """
    path = Path(path)
    if path.is_dir():
        path = path / default_file
    if not path.exists():
        raise ValueError(f"{missing}: {path}")
    data = path.read_bytes()
    manifest_path = path.with_suffix(".json")
    if not manifest_path.exists():
        raise ValueError(f"manifest {manifest_path} of checkpoint {path} is missing: a checkpoint is only loaded "
                         "against the sha256 in its manifest (the trainer writes both)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"manifest {manifest_path} of checkpoint {path} is not a JSON object: {error}") from error
    if not isinstance(manifest, dict):
        raise ValueError(f"manifest {manifest_path} of checkpoint {path} is not a JSON object ({type(manifest).__name__})")
    actual = hashlib.sha256(data).hexdigest()
    if manifest.get("sha256") != actual:
        raise ValueError(f"checksum mismatch for checkpoint {path}: {manifest_path.name} says sha256 {manifest.get('sha256')}, file has {actual}")
    return path, data, manifest


def non_finite_tensors(state: Any, prefix: str = "") -> list[str]:
    """Names of the floating-point tensors in ``state`` (a state_dict, or nested dicts/lists of them)
    holding a NaN or an infinity; empty when every value is finite."""
    import torch

    found: list[str] = []
    if isinstance(state, torch.Tensor):
        if state.is_floating_point() and not bool(torch.isfinite(state).all()):
            found.append(prefix or "tensor")
    elif isinstance(state, dict):
        for key, value in state.items():
            found += non_finite_tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            found += non_finite_tensors(value, f"{prefix}[{i}]")
    return found


def refuse_non_finite(state: Any, what: str) -> None:
    """ValueError naming ``what`` and the first offending tensors when ``state`` holds a NaN or an infinity."""
    bad = non_finite_tensors(state)
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ValueError(f"{what} holds non-finite values (NaN or inf) in {shown}")


def save_state_dict(state: dict[str, Any], path: Path | str, what: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write a predictor's ``state`` (a state_dict) to ``path`` and ``manifest`` plus the bytes' sha256 to
    ``path.with_suffix('.json')``, each atomically; returns the manifest written.

    Raises:
        ValueError: (writing nothing) ``state`` holds a NaN or an infinity.
    """
    import io

    import torch

    from core_env.npz import write_atomic

    refuse_non_finite(state, what)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    path = Path(path)
    manifest = {**manifest, "weights": path.name, "sha256": hashlib.sha256(data).hexdigest()}
    write_atomic(path, data)
    write_atomic(path.with_suffix(".json"), (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return manifest


#: First bytes of a file written by :func:`write_checked`, followed by the payload's sha256 (hex) and a newline.
CHECKED_MAGIC = b"mara-checked/1 "


def write_checked(path: Path | str, state: Any) -> None:
    """``torch.save`` of ``state`` behind a header holding the payload's sha256, written atomically in one
    file (so no crash can leave a payload and its checksum out of step); read with :func:`read_checked`.
    For files the trainer resumes from (training state, demonstrations)."""
    import io

    import torch

    from core_env.npz import write_atomic

    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    write_atomic(Path(path), CHECKED_MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)


def read_checked(path: Path | str, what: str) -> Any:
    """The state :func:`write_checked` wrote to ``path``, after verifying its sha256.

    Raises:
        ValueError: naming the file and ``what`` it should be, when it has no checksum header (damaged,
            foreign, or written by an older version: start again with another --out), when the payload
            does not match its checksum (a flipped bit, a truncated write), or when it cannot be read.
    """
    path = Path(path)
    raw = path.read_bytes()
    header, newline, data = raw.partition(b"\n")
    if not raw.startswith(CHECKED_MAGIC) or not newline:
        raise ValueError(f"{path} has no checksum header: it is not {what} written by this version, or it is damaged "
                         "(delete it, or use another --out, to start again)")
    expected, actual = header[len(CHECKED_MAGIC):].decode("ascii", "replace"), hashlib.sha256(data).hexdigest()
    if expected != actual:
        raise ValueError(f"checksum mismatch for {what} {path}: the header says sha256 {expected}, the content has {actual}")
    return read_torch_file(path, what, data)


def read_torch_file(path: Path, what: str, data: bytes | None = None) -> Any:
    """``torch.load`` of ``path`` (or of ``data``, bytes already read from it; weights only, on CPU) whose
    failure (a truncated or foreign file raises assorted torch/pickle errors) is a ValueError naming the
    file and ``what`` it should be."""
    import io

    import torch

    try:
        return torch.load(path if data is None else io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:
        raise ValueError(f"{path} could not be read as {what} (truncated or not a torch file?): {error}") from error
