"""Import your own training-loss curves into a versioned, checksummed bank file.

A *bank file* is what a task set can be built on instead of the committed corpus: your runs, each a
sequence of per-step training losses, with a family label, flags and a fixed train/eval split.

Sources (``fmt`` is guessed from the path when not given):

* ``"csv"``: long format, one row per logged point, a header with ``run_id``, ``step``, ``loss`` and
  optionally ``family`` (column names configurable). Rows may come in any order; a ``(run, step)``
  pair may appear only once. ``nan``/``inf`` are read as non-finite losses (divergence), anything else
  that is not a number is an error.
* ``"npz"``: NumPy archive. Either ``losses`` (2-D, one run per row, padded at the end with NaN; or a
  1-D object array of 1-D arrays, which needs ``allow_pickle=True``), with optional aligned ``steps``,
  ``run_id`` and ``family`` arrays; or one 1-D array per run, named by its key (``"family/run"`` keys
  set the family). A single 2-D array under any key counts as ``losses``.
* ``"tensorboard"``: a directory of event files (or one event file) and a scalar ``tag``. Every
  directory holding event files is a run, named by its path below the source; runs nested two deep
  (``SOURCE/family/run/``) take the top directory as their family. Needs the optional ``tensorboard``
  package.

What :func:`import_curves` does, in this order, each step recorded in the manifest (``transformations``)
and printed by the CLI (``python -m core_env.curves import``); nothing is changed silently:

1. read the runs; sort each run's points by step;
2. flag every run by the public rule (:func:`core_env.curves.flags.flag_runs`) on its logged losses;
3. truncate a run at its first non-finite loss (it is flagged diverged; the rule's finite prefix);
4. reject (or, with ``drop_bad_runs=True``, drop) runs with fewer than 2 finite points, e.g. NaN-only runs;
5. resample onto one step grid: a curve point is ``step_unit`` steps (default: the greatest common
   divisor of all logged step differences, so a run logged every k steps needs no resampling); grid
   points that were not logged are linearly interpolated and logged points off the grid are dropped;
6. clip losses into the CurveBank's range [``LOSS_FLOOR``, ``LOSS_CEIL``] = [1e-6, 1e6], with counts;
7. split: per family (stratified), a seeded share ``eval_share`` of runs goes to ``eval``, the rest to
   ``train``; every family with at least 2 runs is in both splits, a family with one run is train only.

The bank file (:func:`write_bank`, byte-reproducible via :mod:`core_env.npz`, written atomically) holds
``values`` (float64, every curve concatenated), ``offsets``, ``flags``, ``split`` (0 train, 1 eval),
``family``, ``run_id`` and ``manifest`` (UTF-8 JSON): format and version, the source path and sha256,
the options, the flag rule, per-run flags / family / split / lengths, every transformation, and the
sha256 of every array, which :func:`load_bank` verifies before returning a :class:`CurveBank`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core_env.curves.bank import LOSS_CEIL, LOSS_FLOOR, CurveBank
from core_env.curves.flags import (DIVERGED, EXPLODE_FACTOR, NON_LEARNER, NON_LEARNER_RATIO, RULE_VERSION, describe, finite_prefix,
                                   flag_runs)
from core_env.extras import needs
from core_env.npz import read_npz, write_npz

#: Identifies a bank file and its layout version (bumped on any incompatible change).
FORMAT = "core_env.curves.bank"
FORMAT_VERSION = 2  # 2: the manifest carries its own sha256 (manifest_sha256)
#: Names a bank may not take: the built-in task sets (a bank named ``id`` would pass for the corpus's).
RESERVED_NAMES = ("id", "rl_ood", "vit_ood", "stress")
FORMATS = ("csv", "npz", "tensorboard")
SPLITS = ("train", "eval", "all")
SPLIT_CODES = {"train": 0, "eval": 1}
DEFAULT_FAMILY = "imported"
#: Most points a bank may hold after resampling (float64; the CurveBank keeps ~3 arrays of this size).
MAX_POINTS = 10_000_000
#: Array members of a bank file, in the order their checksums are listed.
ARRAYS = ("values", "offsets", "flags", "split", "family", "run_id")


class CurveImportError(ValueError):
    """A source file cannot be imported; the message names the file and the row or run."""


@dataclass
class RawRun:
    """One run as read from the source: steps sorted ascending, losses as logged."""

    run_id: str
    family: str | None
    steps: np.ndarray  # int64, strictly increasing
    losses: np.ndarray  # float64, may hold non-finite values
    where: str  # how to point at it in a message, e.g. "runs.csv: run 'a' (lines 2-41)"
    unsorted: bool = False  # its points were not in step order in the source


@dataclass
class _Read:
    """What a reader returns: the runs, where the families came from, notes and its transformations."""

    runs: list[RawRun]
    family_source: str
    notes: list[str] = field(default_factory=list)
    transformations: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] | None = None  # tensorboard: every event file read
    tag: str | None = None  # tensorboard: the scalar tag read
    unsorted: list[str] = field(default_factory=list)  # runs whose points were not in step order


# ------------------------------------------------------------------------------------------ helpers
def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _array_sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _family_seed(family: str) -> int:
    return int.from_bytes(hashlib.sha256(family.encode("utf-8")).digest()[:4], "little")


def _names(ids: Sequence[str], limit: int = 5) -> str:
    """``'a', 'b' and 3 more (listed in the manifest)``."""
    shown = ", ".join(repr(str(i)) for i in list(ids)[:limit])
    return shown if len(ids) <= limit else f"{shown} and {len(ids) - limit} more (listed in the manifest)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("s") else "s")


def detect_format(source: str | os.PathLike) -> str:
    """``"csv"``, ``"npz"`` or ``"tensorboard"`` from the path (directory or ``*tfevents*`` = tensorboard)."""
    path = Path(source)
    if path.is_dir() or "tfevents" in path.name:
        return "tensorboard"
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".npz":
        return "npz"
    raise CurveImportError(f"{path}: cannot tell the format from the name; pass fmt= / --format one of {list(FORMATS)}")


# ---------------------------------------------------------------------------------------------- csv
#: Steps must lie in [0, MAX_STEP] (int64 arithmetic on step differences stays exact).
MAX_STEP = 2**62


def _parse_step(text: str, where: str) -> int:
    if "_" in text:  # Python's int()/float() would read "1_000" as 1000; a CSV number has no underscores
        raise CurveImportError(f"{where}: step {text!r} is not a number")
    try:
        step = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise CurveImportError(f"{where}: step {text!r} is not a number") from None
        if not math.isfinite(value) or not value.is_integer():
            raise CurveImportError(f"{where}: step {text!r} is not an integer step")
        step = int(value)
    if not 0 <= step <= MAX_STEP:
        raise CurveImportError(f"{where}: step {text!r} is outside [0, 2**62]")
    return step


def _parse_loss(text: str, where: str) -> float:
    if "_" in text:
        raise CurveImportError(f"{where}: loss {text!r} is not a number")
    try:
        return float(text)
    except ValueError:
        raise CurveImportError(f"{where}: loss {text!r} is not a number") from None


def _rows(reader: Any, path: Path):
    """The reader's rows; a malformed line (e.g. a field over csv.field_size_limit()) is a CurveImportError naming it."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise CurveImportError(f"{path}: line {reader.line_num}: {error}") from None


def _read_csv(path: Path, run_column: str, step_column: str, loss_column: str, family_column: str | None,
              family_required: bool) -> _Read:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    with open(path, newline="", encoding="utf-8-sig") as handle:
        text = handle.read()
    if not text.strip():
        raise CurveImportError(f"{path}: the file is empty")
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as error:  # e.g. a field over csv.field_size_limit()
        raise CurveImportError(f"{path}: line {reader.line_num}: {error}") from None
    missing = [c for c in (run_column, step_column, loss_column) if c not in header]
    if family_required and family_column not in header:
        missing.append(family_column)
    if missing:
        raise CurveImportError(f"{path}: missing column(s) {missing} in the header (line 1); found {header}")
    col = {name: header.index(name) for name in (run_column, step_column, loss_column)}
    fam_col = header.index(family_column) if family_column in header else None
    per_run: dict[str, dict[str, list]] = {}
    blank, rows = 0, 0
    for row in _rows(reader, path):
        lineno = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            blank += 1
            continue
        rows += 1
        where = f"{path}: row {rows} (line {lineno})"
        if len(row) != len(header):
            raise CurveImportError(f"{where}: {len(row)} fields, the header has {len(header)}")
        run = row[col[run_column]].strip()
        if not run:
            raise CurveImportError(f"{where}: empty {run_column!r}")
        step = _parse_step(row[col[step_column]].strip(), f"{where}, column {step_column!r}")
        loss = _parse_loss(row[col[loss_column]].strip(), f"{where}, column {loss_column!r}")
        family = None
        if fam_col is not None:
            family = row[fam_col].strip()
            if not family:
                raise CurveImportError(f"{where}: empty {family_column!r}")
        entry = per_run.setdefault(run, {"steps": [], "losses": [], "lines": [], "family": family, "family_line": lineno})
        if family != entry["family"]:
            raise CurveImportError(f"{where}: run {run!r} has family {family!r} here but {entry['family']!r} on line "
                                   f"{entry['family_line']}; a run belongs to one family")
        entry["steps"].append(step)
        entry["losses"].append(loss)
        entry["lines"].append(lineno)
    if not per_run:
        raise CurveImportError(f"{path}: the file has a header but no data rows")
    runs, unsorted = [], []
    for run, entry in per_run.items():
        steps, order, k = _by_step(np.asarray(entry["steps"], dtype=np.int64), run, unsorted)
        lines = np.asarray(entry["lines"], dtype=np.int64)[order]
        if k is not None:
            raise CurveImportError(f"{path}: line {lines[k + 1]}: duplicate step {steps[k]} for run {run!r} "
                                   f"(first on line {lines[k]}); each (run, step) may appear once")
        losses = np.asarray(entry["losses"], dtype=np.float64)[order]
        runs.append(RawRun(run, entry["family"], steps, losses, f"{path}: run {run!r} (lines {lines.min()}-{lines.max()})"))
    read = _Read(runs, f"column {family_column!r}" if fam_col is not None else "default", unsorted=unsorted)
    if blank:
        read.notes.append(f"skipped {_plural(blank, 'blank line')} in {path.name}")
    return read


def _by_step(steps: np.ndarray, run: str, unsorted: list[str]) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(sorted steps, the stable sorting order, index of the first duplicated step or None); ``run`` is
    appended to ``unsorted`` when the steps were not in order."""
    order = np.argsort(steps, kind="stable")
    if np.any(order != np.arange(order.size)):
        unsorted.append(run)
    steps = steps[order]
    dup = np.flatnonzero(steps[1:] == steps[:-1])
    return steps, order, (int(dup[0]) if dup.size else None)


# ---------------------------------------------------------------------------------------------- npz
def _numeric(array: np.ndarray, what: str) -> np.ndarray:
    if array.dtype.kind not in "fiu":
        raise CurveImportError(f"{what} has dtype {array.dtype}, not numbers")
    return array.astype(np.float64)


def _strings(arrays: dict[str, np.ndarray], key: str, n: int, path: Path) -> list[str] | None:
    if key not in arrays:
        return None
    values = arrays[key]
    if values.ndim != 1 or values.size != n or values.dtype.kind not in "US":
        raise CurveImportError(f"{path}: array {key!r} must be 1-D strings with one entry per run ({n}); "
                               f"got shape {values.shape}, dtype {values.dtype}")
    out = [v.decode() if isinstance(v, bytes) else str(v) for v in values.tolist()]
    for i, v in enumerate(out):
        if not v.strip():
            raise CurveImportError(f"{path}: array {key!r}, row {i}: empty string")
    return out


def _read_npz(path: Path, allow_pickle: bool) -> _Read:
    if path.stat().st_size == 0:
        raise CurveImportError(f"{path}: the file is empty")
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic == b"\x93NUMPY":
        raise CurveImportError(f"{path}: holds a single array (.npy), not an .npz archive")
    try:  # every member's header is checked against its size before anything is allocated
        arrays = read_npz(path, allow_pickle=allow_pickle)
    except ValueError as exc:
        pickled = re.search(r"member '(.+?)(\.npy)?' cannot be read as an array: an object array", str(exc))
        if pickled:
            raise CurveImportError(f"{path}: array {pickled.group(1)!r} is an object (ragged) array, stored as a pickle, which can "
                                   "run code when loaded; pass allow_pickle=True / --allow-pickle if you trust the "
                                   "file, or store one 1-D array per run instead") from None
        raise CurveImportError(str(exc)) from None

    keys = list(arrays)
    if not keys:
        raise CurveImportError(f"{path}: the archive holds no arrays")
    notes: list[str] = []
    transformations: list[dict[str, Any]] = []
    main = "losses" if "losses" in keys else None
    if main is None and len(keys) == 1 and arrays[keys[0]].ndim == 2:
        main = keys[0]
    runs: list[RawRun] = []
    if main is not None:
        losses = arrays[main]
        if losses.dtype == object:
            rows = []
            for i, item in enumerate(losses.ravel().tolist()):
                try:
                    row = np.asarray(item, dtype=np.float64)
                except (TypeError, ValueError):
                    raise CurveImportError(f"{path}: array {main!r}, run {i}: not a sequence of numbers") from None
                if row.ndim != 1:
                    raise CurveImportError(f"{path}: array {main!r}, run {i}: expected a 1-D sequence, got shape {row.shape}")
                rows.append(row)
            padded = False
        else:
            values = _numeric(losses, f"{path}: array {main!r}")
            if values.ndim == 1:
                values = values[None, :]
            if values.ndim != 2:
                raise CurveImportError(f"{path}: array {main!r} must be 2-D (one run per row), got shape {losses.shape}")
            rows, padded = list(values), True
        n = len(rows)
        if n == 0:
            raise CurveImportError(f"{path}: array {main!r} holds no runs")
        run_ids = _strings(arrays, "run_id", n, path)
        families = _strings(arrays, "family", n, path)
        steps_all = None
        if "steps" in keys:
            steps_all = arrays["steps"]
            if steps_all.dtype == object:
                steps_all = list(steps_all.ravel().tolist())
            elif steps_all.ndim == 1 and n == 1:
                steps_all = [steps_all]
            if len(steps_all) != n:
                raise CurveImportError(f"{path}: array 'steps' has {len(steps_all)} rows, {main!r} has {n}")
        ignored = [k for k in keys if k not in (main, "run_id", "family", "steps")]
        if ignored:
            notes.append(f"ignored arrays in {path.name}: {ignored}")
        width = len(str(n - 1))
        ids = run_ids or [f"row{i:0{width}d}" for i in range(n)]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise CurveImportError(f"{path}: array 'run_id' names run {dup!r} more than once")
        pad_values, pad_rows = 0, 0
        for i, row in enumerate(rows):
            where = f"{path}: array {main!r}, row {i} (run {ids[i]!r})"
            if steps_all is not None:
                steps = np.asarray(steps_all[i], dtype=np.float64).ravel()
                if steps.size != row.size:
                    raise CurveImportError(f"{where}: {steps.size} steps for {row.size} losses")
            else:
                steps = np.arange(row.size, dtype=np.float64)
            if padded:
                finite = np.flatnonzero(~np.isnan(row))
                keep = int(finite[-1]) + 1 if finite.size else row.size  # an all-NaN row is a NaN-only run, not padding
                if keep < row.size:
                    pad_values += row.size - keep
                    pad_rows += 1
                row, steps = row[:keep], steps[:keep]
            runs.append(_npz_run(row, steps, ids[i], families[i] if families else None, where))
        if pad_rows:
            transformations.append({"kind": "remove_padding", "rows": pad_rows, "values": pad_values,
                                    "message": f"removed the trailing NaN padding of {_plural(pad_rows, 'row')} "
                                               f"({_plural(pad_values, 'value')}) of {main!r}"})
        family_source = "array 'family'" if families else "default"
    else:
        family_source = "default"
        for key in sorted(keys):
            array = arrays[key]
            if array.dtype == object or array.ndim != 1:
                raise CurveImportError(f"{path}: array {key!r} has shape {array.shape} and dtype {array.dtype}; without a "
                                       "'losses' array every array must be one run, a 1-D array of losses")
            values = _numeric(array, f"{path}: array {key!r}")
            family, _, run = key.rpartition("/")
            if family:
                family_source = "key prefix 'family/run'"
            runs.append(_npz_run(values, np.arange(values.size, dtype=np.float64), key, family or None, f"{path}: array {key!r}"))
    return _Read(runs, family_source, notes, transformations, unsorted=[r.run_id for r in runs if r.unsorted])


def _npz_run(losses: np.ndarray, steps: np.ndarray, run_id: str, family: str | None, where: str) -> RawRun:
    if not np.all(np.isfinite(steps)) or not np.all(steps == np.round(steps)):
        raise CurveImportError(f"{where}: steps must be finite integers")
    steps = steps.astype(np.int64)
    order = np.argsort(steps, kind="stable")
    steps, losses = steps[order], losses[order]
    dup = np.flatnonzero(steps[1:] == steps[:-1])
    if dup.size:
        raise CurveImportError(f"{where}: duplicate step {steps[dup[0]]}; each (run, step) may appear once")
    return RawRun(run_id, family, steps, losses, where, unsorted=bool(np.any(order != np.arange(order.size))))


# -------------------------------------------------------------------------------------- tensorboard
def _event_accumulator():
    with needs(__name__, "tensorboard"):
        from tensorboard.backend.event_processing import event_accumulator
        from tensorboard.util import tensor_util
    return event_accumulator, tensor_util


def _check_records(path: Path) -> None:
    """Refuse an event file whose TFRecord framing is broken: every record is ``length`` (uint64), its
    masked CRC-32C, ``length`` bytes of data and their masked CRC-32C. TensorBoard's reader stops or skips
    silently at a bad record; here a flipped bit or a cut inside a record is an error naming the file and
    the byte offset (a file cut exactly between two records cannot be told from a shorter log)."""
    with needs(__name__, "tensorboard"):
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    data, offset = path.read_bytes(), 0
    while offset < len(data):
        header = data[offset:offset + 12]
        if len(header) < 12:
            raise CurveImportError(f"{path}: the event file ends inside a record header at byte {offset} (a cut or partly written file)")
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != length_crc:
            raise CurveImportError(f"{path}: the record at byte {offset} fails its length checksum (a corrupt file)")
        body = data[offset + 12:offset + 12 + length + 4]
        if len(body) < length + 4:
            raise CurveImportError(f"{path}: the event file ends inside the record at byte {offset} (a cut or partly written file)")
        if masked_crc32c(body[:length]) != struct.unpack("<I", body[length:])[0]:
            raise CurveImportError(f"{path}: the record at byte {offset} fails its data checksum (a corrupt file)")
        offset += 12 + length + 4


def _read_tensorboard(path: Path, tag: str | None) -> _Read:
    event_accumulator, tensor_util = _event_accumulator()
    if path.is_file():
        groups = {path.name: [path]}
        base = path.parent
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and "tfevents" in p.name)
        if not files:
            raise CurveImportError(f"{path}: no TensorBoard event files (*tfevents*) below this directory")
        groups: dict[str, list[Path]] = {}
        for f in files:
            rel = f.parent.relative_to(path).as_posix()
            groups.setdefault(path.name if rel == "." else rel, []).append(f)
        base = path
    file_info = []
    loaded: dict[str, dict[str, list[tuple[int, float]]]] = {}  # run -> tag -> (step, value)
    for run, run_files in groups.items():
        for f in run_files:
            if f.stat().st_size == 0:
                raise CurveImportError(f"{f}: the event file is empty")
            _check_records(f)
            file_info.append({"path": f.relative_to(base).as_posix(), "sha256": _sha256_file(f), "bytes": f.stat().st_size})
        source = str(run_files[0]) if path.is_file() else str(run_files[0].parent)
        acc = event_accumulator.EventAccumulator(source, size_guidance={"scalars": 0, "tensors": 0}, purge_orphaned_data=False)
        try:
            acc.Reload()
        except Exception as exc:
            raise CurveImportError(f"{source}: cannot read the TensorBoard events of run {run!r} ({type(exc).__name__}: {exc})") from None
        tags = acc.Tags()
        points: dict[str, list[tuple[int, float]]] = {}
        for t in tags.get("scalars", []):
            points[t] = [(int(e.step), float(e.value)) for e in acc.Scalars(t)]
        for t in tags.get("tensors", []):  # TF2's tf.summary.scalar writes scalars as tensors
            if t in points:
                continue
            values = []
            for e in acc.Tensors(t):
                array = tensor_util.make_ndarray(e.tensor_proto)
                if array.size != 1 or array.dtype.kind not in "fiu":
                    break  # not a scalar series
                values.append((int(e.step), float(array.reshape(()))))
            else:
                points[t] = values
        loaded[run] = points
    notes = []
    if tag is None:
        all_tags = sorted({t for points in loaded.values() for t in points})
        if len(all_tags) != 1:
            raise CurveImportError(f"{path}: pass tag= / --tag to choose the scalar to import; scalar tags found: {all_tags}")
        tag = all_tags[0]
        notes.append(f"used the only scalar tag in the event files, {tag!r}")
    runs, family_source, unsorted = [], "default", []
    for run, points in loaded.items():
        where = f"{path}: run {run!r}, tag {tag!r}"
        parts = run.split("/")
        family = parts[0] if len(parts) >= 2 else None
        if family:
            family_source = "directory layout SOURCE/family/run/"
        if tag not in points:
            runs.append(RawRun(run, family, np.zeros(0, np.int64), np.zeros(0),
                               f"{path}: run {run!r} has no scalar {tag!r} (its scalar tags: {sorted(points)}) and"))
            continue
        steps, order, k = _by_step(np.array([st for st, _ in points[tag]], dtype=np.int64), run, unsorted)
        losses = np.array([v for _, v in points[tag]], dtype=np.float64)[order]
        if k is not None:
            raise CurveImportError(f"{where}: step {steps[k]} is logged more than once (a restarted job appends to the "
                                   "same run); remove the stale event file or the duplicate steps")
        runs.append(RawRun(run, family, steps, losses, where))
    return _Read(runs, family_source, notes, files=file_info, tag=tag, unsorted=unsorted)


# ------------------------------------------------------------------------------------------- result
@dataclass(frozen=True)
class ImportedBank:
    """Curves ready for a bank file: the final per-step losses and everything the manifest records.

    Attributes:
        curves: one read-only float64 array per run (after every transformation), bank order
            (sorted by family, then run id).
        run_ids, family: per run.
        flags: (R,) uint8 flag bits (:mod:`core_env.curves.flags`).
        split: (R,) uint8, 0 = train, 1 = eval.
        manifest: the JSON-ready manifest (:func:`write_bank` adds the array checksums).
    """

    curves: tuple[np.ndarray, ...]
    run_ids: tuple[str, ...]
    family: tuple[str, ...]
    flags: np.ndarray
    split: np.ndarray
    manifest: dict[str, Any]

    def __len__(self) -> int:
        return len(self.curves)

    def arrays(self) -> dict[str, np.ndarray]:
        """The array members of the bank file (without the manifest)."""
        lengths = [c.size for c in self.curves]
        return {
            "values": np.concatenate(self.curves).astype(np.float64),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "flags": np.asarray(self.flags, dtype=np.uint8),
            "split": np.asarray(self.split, dtype=np.uint8),
            "family": np.asarray(self.family, dtype=str),
            "run_id": np.asarray(self.run_ids, dtype=str),
        }

    def bank(self, split: str = "all", name: str | None = None) -> CurveBank:
        """A :class:`CurveBank` of the runs in ``split`` (``"train"``, ``"eval"`` or ``"all"``)."""
        return _bank_of(self.arrays(), split, name or self.manifest["name"], self.manifest["source"]["path"])

    def messages(self) -> list[str]:
        """Every transformation and note, as the CLI prints them."""
        return [t["message"] for t in self.manifest["transformations"]] + list(self.manifest["notes"])


def import_curves(
    source: str | os.PathLike,
    fmt: str | None = None,
    *,
    tag: str | None = None,
    eval_share: float = 0.3,
    seed: int = 0,
    family_column: str | None = None,
    run_column: str = "run_id",
    step_column: str = "step",
    loss_column: str = "loss",
    default_family: str = DEFAULT_FAMILY,
    step_unit: int | None = None,
    drop_bad_runs: bool = False,
    allow_pickle: bool = False,
    name: str | None = None,
    max_points: int = MAX_POINTS,
) -> ImportedBank:
    """Read training-loss curves from ``source`` and prepare a bank (module docstring for every step).

    Args:
        source: a CSV file, an ``.npz`` file, or a TensorBoard log directory / event file.
        fmt: ``"csv"``, ``"npz"`` or ``"tensorboard"``; guessed from ``source`` when None.
        tag: TensorBoard scalar tag (optional when the event files hold exactly one).
        eval_share: share of each family's runs that goes to the eval split, 0 < eval_share < 1.
        seed: seed of the split.
        family_column: CSV column with the family label (default ``"family"`` if the header has it;
            naming a column makes it required).
        run_column, step_column, loss_column: the other CSV columns.
        default_family: the family of runs whose source gives none.
        step_unit: steps per curve point (default: gcd of all logged step differences).
        drop_bad_runs: drop runs with fewer than 2 finite points (NaN-only, one point, a run missing the
            TensorBoard tag) instead of raising; every drop is recorded.
        allow_pickle: allow ragged object arrays in an ``.npz`` (a pickle can run code: trusted files only).
        name: the bank's name (default: the source's file name without suffix).
        max_points: refuse to build more points than this after resampling.

    Raises:
        CurveImportError: (a ValueError) naming the file and the row or run for a bad source.
        ImportError: naming the extra when TensorBoard files are read without ``tensorboard``.
    """
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    fmt = detect_format(path) if fmt is None else str(fmt).lower()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {list(FORMATS)}")
    if not (isinstance(eval_share, (int, float)) and 0.0 < float(eval_share) < 1.0):
        raise ValueError(f"eval_share must be strictly between 0 and 1, got {eval_share!r}")
    if step_unit is not None and (int(step_unit) != step_unit or step_unit < 1):
        raise ValueError(f"step_unit must be a positive integer, got {step_unit!r}")
    if not str(default_family).strip():
        raise ValueError("default_family must be a non-empty string")
    seed = int(seed)
    if fmt == "csv":
        if path.is_dir():
            raise CurveImportError(f"{path}: is a directory, not a CSV file")
        read = _read_csv(path, run_column, step_column, loss_column, family_column or "family", family_column is not None)
    elif fmt == "npz":
        if path.is_dir():
            raise CurveImportError(f"{path}: is a directory, not an .npz file")
        read = _read_npz(path, allow_pickle)
    else:
        read = _read_tensorboard(path, tag)
        tag = read.tag
    if not read.runs:
        raise CurveImportError(f"{path}: no runs found")
    transformations = list(read.transformations)
    notes = list(read.notes)
    if read.unsorted:
        unsorted = sorted(read.unsorted)
        transformations.insert(0, {"kind": "sort_steps", "runs": unsorted,
                                   "message": f"sorted by step the points of {_plural(len(unsorted), 'run')} not logged in step order: {_names(unsorted)}"})

    runs = read.runs
    ids = [r.run_id for r in runs]
    if len(set(ids)) != len(ids):
        raise CurveImportError(f"{path}: run id {next(i for i in ids if ids.count(i) > 1)!r} appears more than once")
    if read.family_source == "default":
        notes.append(f"the source gives no family: every run is in family {default_family!r}")
    else:
        unlabeled = [r.run_id for r in runs if r.family is None]
        notes.append(f"families from the {read.family_source}" + (f"; {_plural(len(unlabeled), 'run')} without one in family "
                                                                   f"{default_family!r}: {_names(unlabeled)}" if unlabeled else ""))
    for run in runs:
        if run.family is None:
            run.family = str(default_family)

    # 2. flags on the logged losses; 3. every run is cut to its finite prefix (recorded below for kept runs)
    flags = flag_runs([r.losses for r in runs])
    prefixes = []
    for r in runs:
        p = finite_prefix(r.losses)
        prefixes.append((r.steps[: p.size], p))

    # the step unit of the grid (step 5), from every logged step difference of the finite prefixes
    diffs = np.concatenate([np.diff(st) for st, _ in prefixes])
    unit_source = "option"
    if step_unit is None:
        step_unit = int(np.gcd.reduce(diffs)) if diffs.size else 1
        unit_source = "auto (greatest common divisor of the logged step differences)"
    step_unit = int(step_unit)

    # 4. runs with fewer than 2 finite points (or 2 grid points) are errors, or dropped on request
    bad: dict[str, str] = {}
    for r, (steps, p) in zip(runs, prefixes):
        if r.losses.size == 0:
            reason = "has no points"
        elif p.size == 0:
            reason = ("is NaN-only" if np.all(np.isnan(r.losses)) else
                      f"has no finite loss before its first non-finite one (step {int(r.steps[0])}: {float(r.losses[0])!r})")
        elif p.size < 2:
            reason = ("has only 1 point" if r.losses.size == 1 else
                      f"has only 1 finite point before its first non-finite loss (step {int(r.steps[1])})")
        elif int(steps[-1] - steps[0]) < step_unit:
            reason = f"spans {int(steps[-1] - steps[0])} steps, less than one step unit ({step_unit}): 1 point on the grid"
        else:
            continue
        if not drop_bad_runs:
            raise CurveImportError(f"{r.where} {reason}; a curve needs at least 2 finite points "
                                   "(drop_bad_runs=True / --drop-bad-runs drops such runs, recorded in the manifest)")
        bad[r.run_id] = reason
    if bad:
        transformations.append({"kind": "drop_run", "runs": bad, "message": f"dropped {_plural(len(bad), 'run')} with fewer than 2 finite points: "
                                + _names([f"{k} ({v})" for k, v in bad.items()])})
    keep = [i for i, r in enumerate(runs) if r.run_id not in bad]
    if not keep:
        raise CurveImportError(f"{path}: no run has 2 or more finite points")
    runs = [runs[i] for i in keep]
    prefixes = [prefixes[i] for i in keep]
    flags = flags[keep]
    truncated: dict[str, dict[str, Any]] = {}
    for r, (_, p) in zip(runs, prefixes):
        if p.size < r.losses.size:
            truncated[r.run_id] = {"step": int(r.steps[p.size]), "value": repr(float(r.losses[p.size])),
                                   "points_dropped": int(r.losses.size - p.size),
                                   "finite_points_dropped": int(np.isfinite(r.losses[p.size:]).sum())}
    if truncated:
        transformations.append({"kind": "truncate_non_finite", "runs": truncated,
                                "message": f"truncated {_plural(len(truncated), 'run')} at the first non-finite loss (flagged diverged), "
                                           f"{_plural(sum(t['points_dropped'] for t in truncated.values()), 'point')} dropped: "
                                           + _names([f"{k} at step {v['step']} ({v['value']})" for k, v in truncated.items()])})

    # 5. one step grid
    total = sum((int(st[-1] - st[0]) // step_unit) + 1 for st, _ in prefixes)
    if total > max_points:
        raise CurveImportError(f"{path}: a step unit of {step_unit} gives {total:,} points (> max_points {max_points:,}); "
                               "pass a larger step_unit / --step-unit")
    curves, resampled = [], {}
    for r, (steps, p) in zip(runs, prefixes):
        grid = steps[0] + step_unit * np.arange((int(steps[-1] - steps[0]) // step_unit) + 1, dtype=np.int64)
        on_grid = np.isin(steps, grid)
        if on_grid.all() and grid.size == steps.size:
            curve = p.copy()
        else:
            curve = np.interp(grid.astype(np.float64), steps.astype(np.float64), p)
            resampled[r.run_id] = {"logged": int(steps.size), "points": int(grid.size), "interpolated": int(grid.size - on_grid.sum()),
                                   "off_grid_dropped": int((~on_grid).sum())}
        curves.append(curve)
    if resampled:
        transformations.append({"kind": "resample", "step_unit": step_unit, "runs": resampled,
                                "message": f"resampled {_plural(len(resampled), 'run')} onto a grid of {step_unit} step(s) per point "
                                           f"(linear interpolation): {sum(v['interpolated'] for v in resampled.values())} points interpolated, "
                                           f"{sum(v['off_grid_dropped'] for v in resampled.values())} logged points off the grid dropped: "
                                           + _names(list(resampled))})
    else:
        notes.append(f"every run is logged at every {_plural(step_unit, 'step')}: one curve point = {_plural(step_unit, 'step')}, no resampling")

    # 6. clipping into the CurveBank's range
    clipped: dict[str, dict[str, int]] = {}
    for i, (r, c) in enumerate(zip(runs, curves)):
        below, above = int((c < LOSS_FLOOR).sum()), int((c > LOSS_CEIL).sum())
        if below or above:
            clipped[r.run_id] = {"below": below, "above": above, "min": float(c.min()), "max": float(c.max())}
            curves[i] = np.clip(c, LOSS_FLOOR, LOSS_CEIL)
    if clipped:
        n_below = sum(v["below"] for v in clipped.values())
        n_above = sum(v["above"] for v in clipped.values())
        transformations.append({"kind": "clip", "floor": LOSS_FLOOR, "ceil": LOSS_CEIL, "below": n_below, "above": n_above, "runs": clipped,
                                "message": f"clipped {_plural(n_below + n_above, 'loss')} into [{LOSS_FLOOR:g}, {LOSS_CEIL:g}]: {n_below} below, "
                                           f"{n_above} above, in {_plural(len(clipped), 'run')}: {_names(list(clipped))}"})

    # bank order: by family, then run id
    order = sorted(range(len(runs)), key=lambda i: (runs[i].family, runs[i].run_id))
    runs = [runs[i] for i in order]
    curves = [curves[i] for i in order]
    prefixes = [prefixes[i] for i in order]
    flags = flags[order]

    # 7. split, stratified by family
    split = np.zeros(len(runs), dtype=np.uint8)
    families: dict[str, dict[str, int]] = {}
    fam_of = np.array([r.family for r in runs], dtype=object)
    for fam in sorted(set(fam_of.tolist())):
        members = np.flatnonzero(fam_of == fam)
        n = members.size
        n_eval = 0 if n < 2 else min(n - 1, max(1, int(math.floor(eval_share * n + 0.5))))
        rng = np.random.default_rng(np.random.SeedSequence([seed, _family_seed(fam)]))
        split[members[rng.permutation(n)[:n_eval]]] = SPLIT_CODES["eval"]
        families[fam] = {"runs": int(n), "train": int(n - n_eval), "eval": int(n_eval),
                         "diverged": int(np.count_nonzero(flags[members] & DIVERGED)),
                         "non_learner": int(np.count_nonzero(flags[members] & NON_LEARNER))}
        if n < 2:
            notes.append(f"family {fam!r} has 1 run: it is in the train split only")

    for c in curves:
        c.setflags(write=False)
    source_info: dict[str, Any] = {"path": str(path.resolve()), "format": fmt}
    if read.files is not None:
        listing = "".join(f"{f['path']}\t{f['sha256']}\n" for f in read.files)
        source_info.update({"sha256": hashlib.sha256(listing.encode()).hexdigest(), "sha256_of": "the sorted 'path<TAB>sha256' lines of files",
                            "files": read.files})
    else:
        source_info.update({"sha256": _sha256_file(path), "bytes": path.stat().st_size})
    run_entries = []
    for r, c, (steps, p), f, s in zip(runs, curves, prefixes, flags.tolist(), split.tolist()):
        run_entries.append({"run_id": r.run_id, "family": r.family, "split": "eval" if s else "train", "flags": int(f), "flag_names": describe(f),
                            "logged_points": int(r.losses.size), "first_step": int(steps[0]),
                            "last_step": int(steps[0]) + step_unit * (int(c.size) - 1), "points": int(c.size)})
    bank_name = str(name) if name else (path.stem if path.is_file() else path.name)
    if bank_name in RESERVED_NAMES:
        raise CurveImportError(f"{path}: the bank would be named {bank_name!r}, a built-in task set's name; pass name= / --name")
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": bank_name,
        "source": source_info,
        "options": {"format": fmt, "tag": tag, "eval_share": float(eval_share), "seed": seed,
                    "family_column": family_column, "run_column": run_column, "step_column": step_column, "loss_column": loss_column,
                    "default_family": default_family, "step_unit": step_unit, "drop_bad_runs": bool(drop_bad_runs),
                    "allow_pickle": bool(allow_pickle), "max_points": int(max_points)},
        "family_source": read.family_source,
        "loss_range": [LOSS_FLOOR, LOSS_CEIL],
        "steps": {"unit": step_unit, "unit_source": unit_source, "resampled": bool(resampled)},
        "flag_rule": {"function": "core_env.curves.flags.flag_runs", "version": RULE_VERSION, "explode_factor": EXPLODE_FACTOR,
                      "non_learner_ratio": NON_LEARNER_RATIO, "bits": {"diverged": DIVERGED, "non_learner": NON_LEARNER},
                      "applied_to": "each run's logged losses sorted by step, before truncation, resampling and clipping"},
        "split": {"method": "per family: round(eval_share x runs) of them, at least 1 and at most runs - 1 (a one-run family: train only), "
                            "drawn by numpy default_rng(SeedSequence([seed, family key]))",
                  "seed": seed, "eval_share": float(eval_share),
                  "train": [r["run_id"] for r in run_entries if r["split"] == "train"],
                  "eval": [r["run_id"] for r in run_entries if r["split"] == "eval"]},
        "families": families,
        "runs": run_entries,
        "transformations": transformations,
        "notes": notes,
        "counts": {"runs": len(runs), "train": int((split == 0).sum()), "eval": int((split == 1).sum()),
                   "points": int(sum(c.size for c in curves))},
    }
    flags = flags.astype(np.uint8)
    for array in (flags, split):
        array.setflags(write=False)
    return ImportedBank(tuple(curves), tuple(r.run_id for r in runs), tuple(r.family for r in runs), flags, split, manifest)


# --------------------------------------------------------------------------------------- bank files
def _manifest_sha256(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON without its own ``manifest_sha256`` entry."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, allow_nan=False).encode("utf-8")).hexdigest()


def write_bank(path: str | os.PathLike, imported: ImportedBank) -> str:
    """Write ``imported`` as a bank file at ``path`` (atomic, byte-reproducible); return its sha256.

    The manifest (``imported.manifest`` plus ``arrays``: dtype, shape and sha256 of every array) is
    stored in the file as the ``manifest`` member (UTF-8 JSON).
    """
    arrays = imported.arrays()
    manifest = dict(imported.manifest)
    manifest["arrays"] = {k: {"dtype": arrays[k].dtype.str, "shape": list(arrays[k].shape), "sha256": _array_sha256(arrays[k])} for k in ARRAYS}
    manifest["manifest_sha256"] = _manifest_sha256(manifest)
    text = json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False)
    arrays["manifest"] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return write_npz(Path(path), arrays)


def _read_file(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"bank file {path} does not exist")
    try:  # every member's header is checked against its size before anything is allocated
        arrays = read_npz(path)
    except ValueError as exc:
        raise ValueError(f"not a bank file (cannot read it as .npz): {exc}") from None
    if "manifest" not in arrays:
        raise ValueError(f"{path}: not a bank file (no 'manifest' member); make one with `python -m core_env.curves import`")
    try:
        manifest = json.loads(arrays.pop("manifest").tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: the manifest is not valid JSON ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: not a bank file (format {manifest.get('format')!r}, expected {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: bank format version {manifest.get('format_version')!r}; this core_env reads version {FORMAT_VERSION} "
                         "(import the curves again with `python -m core_env.curves import`)")
    if manifest.get("manifest_sha256") != _manifest_sha256(manifest):
        raise ValueError(f"{path}: checksum mismatch for the manifest (its name, runs, splits or counts were edited or damaged)")
    if manifest.get("name") in RESERVED_NAMES:
        raise ValueError(f"{path}: the bank is named {manifest['name']!r}, a built-in task set's name; import it under another name")
    expected = manifest.get("arrays", {})
    for key in ARRAYS:
        if key not in arrays or key not in expected:
            raise ValueError(f"{path}: array {key!r} is missing from the file or its manifest")
        a, e = arrays[key], expected[key]
        if a.dtype.str != e["dtype"] or list(a.shape) != e["shape"]:
            raise ValueError(f"{path}: array {key!r} is {a.dtype.str} {list(a.shape)}, the manifest says {e['dtype']} {e['shape']}")
        actual = _array_sha256(a)
        if actual != e["sha256"]:
            raise ValueError(f"{path}: checksum mismatch for array {key!r}: manifest sha256 {e['sha256']}, file {actual}")
    n = arrays["flags"].size
    if (arrays["offsets"].shape != (n + 1,) or arrays["offsets"][0] != 0 or arrays["offsets"][-1] != arrays["values"].size
            or np.any(np.diff(arrays["offsets"]) < 1)):
        raise ValueError(f"{path}: offsets do not match values")
    if any(arrays[k].shape != (n,) for k in ("split", "family", "run_id")) or len(manifest.get("runs", [])) != n:
        raise ValueError(f"{path}: split/family/run_id/manifest runs must have one entry per run ({n})")
    if np.any(arrays["split"] > 1):
        raise ValueError(f"{path}: split codes must be 0 (train) or 1 (eval)")
    values = arrays["values"]
    if values.dtype.kind != "f" or not np.all((values >= LOSS_FLOOR) & (values <= LOSS_CEIL)):
        raise ValueError(f"{path}: losses must be floats in [{LOSS_FLOOR:g}, {LOSS_CEIL:g}] (the importer clips them there)")
    if np.any(arrays["flags"] & ~np.uint8(DIVERGED | NON_LEARNER)):
        raise ValueError(f"{path}: run flags may only combine DIVERGED ({DIVERGED}) and NON_LEARNER ({NON_LEARNER})")
    return arrays, manifest


def read_bank_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a bank file, after verifying the file against its checksums."""
    return _read_file(path)[1]


def _bank_of(arrays: dict[str, np.ndarray], split: str, name: str, where: str) -> CurveBank:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    chosen = np.arange(arrays["flags"].size) if split == "all" else np.flatnonzero(arrays["split"] == SPLIT_CODES[split])
    if chosen.size == 0:
        raise ValueError(f"{where}: the bank has no {split} runs")
    values, offsets = arrays["values"], arrays["offsets"]
    curves = [values[offsets[i] : offsets[i + 1]] for i in chosen]
    return CurveBank(name, curves, arrays["family"][chosen].tolist(), arrays["flags"][chosen])


def load_bank(path: str | os.PathLike, split: str = "train", name: str | None = None) -> CurveBank:
    """The :class:`CurveBank` of a bank file's ``split`` (``"train"``, ``"eval"`` or ``"all"``).

    Verifies the file against its manifest first (a ``ValueError`` names the array on a checksum
    mismatch). ``name`` defaults to the manifest's ``name``. Not cached: cache the result if you load
    the same bank repeatedly (banks are immutable).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    arrays, manifest = _read_file(path)
    return _bank_of(arrays, split, name or manifest["name"], str(path))


__all__ = ["CurveImportError", "DEFAULT_FAMILY", "FORMAT", "FORMATS", "FORMAT_VERSION", "ImportedBank", "detect_format",
           "import_curves", "load_bank", "read_bank_manifest", "write_bank"]
