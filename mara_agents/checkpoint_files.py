"""Checkpoint files: resolve a checkpoint, read its bytes, verify them against the manifest beside it; write
them; and the predictors' checkpoint kinds whose manifests also carry checksummed ``digests``.

A checkpoint ``NAME.pt`` must have a manifest ``NAME.json`` (a JSON object) holding the sha256 of the
bytes, and the bytes must match it: a checkpoint without a readable manifest is refused, never loaded
unverified. The writers (:func:`mara_agents.mat.agent.save_policy`,
:func:`mara_agents.integrations.tianshou_ppo.save_checkpoint`, :func:`save_state_dict`) always write both,
atomically with :func:`core_env.npz.write_atomic`. Used by the MAT agent and the Tianshou integration, which
check the manifest's other fields themselves, and by the predictors (:class:`CheckpointKind`: FM's and PFN's
``CHECKPOINT``), whose manifests also hold ``digests`` (:func:`manifest_digests`: the sha256 of each config key,
of each setting read on load, and of the weights' sha256), so an edited config or another weights file is
refused, not read silently; their configs are range-checked (:func:`check_config`) before a model is built.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core_env.extras import needs

#: The package's shipped checkpoints (``mara_agents/checkpoints/``): the training CLIs write there only when told
#: (:mod:`mara_agents.cli_checks`).
SHIPPED_DIR = Path(__file__).resolve().parent / "checkpoints"


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
    with needs(__name__):
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


def save_state_dict(state: dict[str, Any], path: Path | str, what: str, manifest: dict[str, Any],
                    digested: Sequence[str] = ()) -> dict[str, Any]:
    """Write a predictor's ``state`` (a state_dict) to ``path`` and ``manifest`` plus the weights' file name and
    the bytes' ``sha256`` to ``path.with_suffix('.json')``, each atomically; returns the manifest written. With
    ``digested`` (field names, ``"sha256"`` among them to bind the fields to these weights), the manifest also holds
    their ``digests`` (:func:`manifest_digests`).

    Raises:
        ValueError: (writing nothing) ``state`` holds a NaN or an infinity.
    """
    import io

    with needs(__name__):
        import torch

    from core_env.npz import write_atomic

    refuse_non_finite(state, what)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    path = Path(path)
    manifest = {**manifest, "weights": path.name, "sha256": hashlib.sha256(data).hexdigest()}
    if digested:
        manifest["digests"] = manifest_digests(manifest, digested)
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

    with needs(__name__):
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

    with needs(__name__):
        import torch

    try:
        return torch.load(path if data is None else io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:
        raise ValueError(f"{path} could not be read as {what} (truncated or not a torch file?): {error}") from error


# --------------------------------------------------------------------------------------------------
# Predictor checkpoints (FM and PFN): range-checked configs and manifests with digests

#: Bounds of a predictor's config (:func:`check_config`), checked before a model or a CDF table is built from
#: it: a layout whose widths sum to 10**9 would ask for gigabytes.
MAX_WIDTH = 4096
MAX_LAYERS = 32
MAX_BINS = 256
MAX_HORIZON = 4096
#: Relative log losses enter as asinh(x / resolution): below 1e-3 every report is far in the log regime,
#: above 10 every report is in the linear one.
RESOLUTION_RANGE = (1e-3, 10.0)


def check_config(owner: str, config: Any, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """Check a predictor config's ``sizes`` (field -> upper bound: an int in [1, bound]), its ``resolution``
    (in :data:`RESOLUTION_RANGE`) and its ``bin_widths`` (1 to :data:`MAX_BINS` positive ints summing to at most
    :data:`MAX_HORIZON`); return the bin widths as a tuple.

    Raises:
        ValueError: naming ``owner.field``, the bound and the value.
    """
    for name, high in sizes.items():
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise ValueError(f"{owner}.{name} must be an int in [1, {high}], got {value!r}")
    low, high = RESOLUTION_RANGE
    value = config.resolution
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:  # NaN fails too
        raise ValueError(f"{owner}.resolution must be a number in [{low}, {high}], got {value!r}")
    widths = config.bin_widths
    if (not isinstance(widths, (list, tuple)) or not 1 <= len(widths) <= MAX_BINS
            or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths) or sum(widths) > MAX_HORIZON):
        shown = repr(widths) if len(repr(widths)) <= 200 else repr(widths)[:200] + "..."
        raise ValueError(f"{owner}.bin_widths must be 1 to {MAX_BINS} positive ints summing to at most {MAX_HORIZON}, got {shown}")
    return tuple(widths)


class PredictorConfig:
    """Base of a predictor's frozen config dataclass (:class:`mara_agents.predictors.flow_matching.FlowConfig`,
    :class:`mara_agents.predictors.pfn.PFNConfig`): its ``SIZES`` (field -> upper bound), ``resolution`` and
    ``bin_widths`` range-checked on construction (:func:`check_config`), and its JSON form in the checkpoint
    manifest (:meth:`to_dict`, :meth:`from_dict`)."""

    #: The config's name in :meth:`from_dict`'s messages ("flow-matching", "PFN").
    WHAT = "predictor"
    #: Field -> upper bound of the config's sizes (an int in [1, bound]).
    SIZES: Mapping[str, int] = {}

    def __post_init__(self) -> None:
        object.__setattr__(self, "bin_widths", check_config(type(self).__name__, self, self.SIZES))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "bin_widths": list(self.bin_widths)}

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        """Rebuild a config, raising ValueError on missing or unknown keys and bad values."""
        if not isinstance(data, dict):
            raise ValueError(f"{cls.WHAT} config must be a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        if set(data) != names:
            raise ValueError(f"{cls.WHAT} config keys {sorted(data)} do not match the expected {sorted(names)}")
        if not isinstance(data["bin_widths"], list):
            raise ValueError(f"{cls.WHAT} config bin_widths must be a list, got {data['bin_widths']!r}")
        return cls(**{**data, "bin_widths": tuple(data["bin_widths"])})


def manifest_digests(manifest: Mapping[str, Any], fields: Sequence[str]) -> dict[str, str]:
    """The sha256 of each of ``fields`` of ``manifest`` (of the canonical JSON of its name and value), written as
    the manifest's ``digests`` (:func:`save_state_dict`) and verified on load (:func:`verify_digests`). A field
    holding an object is covered key by key (``config.resolution``), so a mismatch names the key; a missing field
    is covered as null."""
    digests = {}
    for field in fields:
        value = manifest.get(field)
        entries = [(f"{field}.{key}", item) for key, item in value.items()] if isinstance(value, dict) else [(field, value)]
        for name, item in entries:
            digests[name] = hashlib.sha256(json.dumps([name, item], sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return digests


def verify_digests(manifest: Mapping[str, Any], fields: Sequence[str], where: Path) -> None:
    """Raise ValueError naming ``where`` (the manifest file) and every field of ``fields`` whose value differs
    from the one its digest was computed from when the checkpoint was written, or when there are no digests."""
    recorded = manifest.get("digests")
    if not isinstance(recorded, dict):
        raise ValueError(f"{where} has no digests of its fields {list(fields)}: it was written by an older version or "
                         "edited (write it again with save_model)")
    expected = manifest_digests(manifest, fields)
    changed = sorted(name for name in expected.keys() | recorded.keys() if expected.get(name) != recorded.get(name))
    if changed:
        raise ValueError(f"{where}: {', '.join(changed)} changed since the checkpoint was written (no longer matching "
                         "its digest in 'digests'): a checkpoint is only loaded with the weights, config and settings it "
                         "was written with")


def refuse_non_positive(model: Any, names: Sequence[str], what: str) -> None:
    """ValueError naming ``what`` and the buffer when one of the buffers ``names`` of ``model`` (a torch module)
    holds a value <= 0."""
    for name in names:
        buffer = model.get_buffer(name)
        if not bool((buffer > 0).all()):
            raise ValueError(f"{what}: buffer {name} must be > 0 everywhere (the model divides by it), got min {buffer.min().item():g}")


@dataclasses.dataclass(frozen=True)
class CheckpointKind:
    """How one predictor's checkpoints are written and verified (:data:`mara_agents.predictors.flow_matching.CHECKPOINT`,
    :data:`mara_agents.predictors.pfn.CHECKPOINT`): the weights ``NAME.pt`` (state_dict) beside the manifest
    ``NAME.json`` holding the weights' sha256 and the ``digests`` of the fields ``digested`` (``"sha256"`` among
    them, so the config and settings are bound to the weights they were written with)."""

    what: str  # "flow-matching", "PFN": named in every message
    fmt: str
    default: Path
    config: Any  # the config class (``from_dict`` range-checks it)
    model: Any  # the model class, built from a config
    digested: tuple[str, ...]
    divisors: tuple[str, ...]
    #: more checks of a loaded (manifest, model, manifest file), raising ValueError; run before the digests
    check: Any = None

    def save(self, model: Any, path: Path | str, info: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Write ``model`` to ``path`` and its manifest (``info``, then the format, config, parameter count, the
        weights' sha256 and the ``digests``) to ``path.with_suffix('.json')``, each atomically; return the manifest.

        Raises:
            ValueError: (writing nothing) a weight holding NaN or inf, or a buffer of ``divisors`` <= 0.
        """
        refuse_non_positive(model, self.divisors, f"the {self.what} model")
        manifest = {**(info or {}), "format": self.fmt, "config": model.config.to_dict(), "parameters": model.parameter_count()}
        return save_state_dict(model.state_dict(), path, f"the {self.what} model", manifest, digested=self.digested)

    def load(self, path: Path | str) -> tuple[Any, dict[str, Any]]:
        """The model and manifest at ``path`` (the weights, or a directory holding the default file name), after
        verifying the weights' sha256, the format, the config (range-checked before a model is built), finite
        weights that fit it, the ``divisors`` > 0, :attr:`check`, and last the ``digests``.

        Raises:
            ValueError: naming the file and the problem (the field or buffer where there is one).
        """
        path, _, manifest = read_verified(path, self.default.name, f"{self.what} checkpoint is missing")
        where = path.with_suffix(".json")
        if manifest.get("format") != self.fmt:
            raise ValueError(f"{where} is not a {self.what} checkpoint manifest (format {manifest.get('format')!r}, expected {self.fmt!r})")
        try:
            config = self.config.from_dict(manifest.get("config"))
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        state = read_torch_file(path, f"a {self.what} state_dict")
        refuse_non_finite(state, f"{self.what} checkpoint {path}")
        model = self.model(config)
        try:
            model.load_state_dict(state, strict=True)
        except Exception as error:  # torch raises RuntimeError/TypeError/KeyError depending on the mismatch
            raise ValueError(f"{self.what} checkpoint {path} does not match its config {config.to_dict()}: {error}") from error
        refuse_non_positive(model, self.divisors, f"{self.what} checkpoint {path}")
        if self.check is not None:
            self.check(manifest, model, where)
        verify_digests(manifest, self.digested, where)
        return model.eval(), manifest
