"""The committed real-curve corpus: packing generator shards, and the numpy-only loader.

Layout under ``core_env/data/corpus/``:

* ``{family}.npz``: ``values`` float16 (every curve concatenated), ``offsets`` int64 (n + 1),
  ``run_index`` int64, ``flags`` uint8 (1 = diverged, 2 = non-learner), ``split`` uint8 (0 = train,
  1 = eval). Written byte-reproducibly.
* ``runs.json.gz``: each run's hyperparameters, steps, wall time and flags, per family.
* ``manifest.json``: sha256 of every file, the family → task set map, counts per split, and the
  generator's library versions.

The split is per run and fixed: every ``EVAL_EVERY``-th run index of a family is an evaluation curve,
the rest are training curves, so no run is in both. Values are clipped into
[LOSS_FLOOR, FLOAT16_MAX] before the float16 cast, so everything loads finite.

Pack from a finished generator output: ``python -m core_env.curves.corpus --src corpus_build``.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
from pathlib import Path

import numpy as np

from core_env.curves.bank import LOSS_FLOOR, CurveBank
from core_env.npz import write_npz

CORPUS_DIR = Path(__file__).resolve().parent.parent / "data" / "corpus"
EVAL_EVERY = 4
FLOAT16_MAX = 6.0e4
SPLIT_CODES = {"train": 0, "eval": 1}

#: Which generator families back which task set.
TASK_SET_FAMILIES: dict[str, tuple[str, ...]] = {
    "id": ("mlp_digits", "mlp_wine", "mlp_breast_cancer", "mlp_synth", "cnn_mnist1d", "charlm"),
    "vit_ood": ("vit_digits",),
    "rl_ood": ("rl_cartpole", "rl_acrobot"),
}


class CorpusError(ValueError):
    """The committed corpus is missing, corrupt or inconsistent."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=None)
def read_manifest(directory: Path = CORPUS_DIR) -> dict:
    path = directory / "manifest.json"
    if not path.exists():
        raise CorpusError(f"the curve corpus manifest {path} is missing")
    return json.loads(path.read_text())


def read_family(family: str, directory: Path = CORPUS_DIR) -> dict[str, np.ndarray]:
    """The arrays of one family file, verified against the manifest's sha256."""
    manifest = read_manifest(directory)
    name = f"{family}.npz"
    expected = manifest["files"].get(name)
    if expected is None:
        raise CorpusError(f"family {family!r} is not in the corpus manifest; families: {sorted(manifest['families'])}")
    path = directory / name
    if not path.exists():
        raise CorpusError(f"corpus file {path} is missing")
    actual = _sha256(path)
    if actual != expected:
        raise CorpusError(f"checksum mismatch for corpus file {name}: expected sha256 {expected}, got {actual}")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    n = arrays["run_index"].size
    if arrays["offsets"].shape != (n + 1,) or arrays["offsets"][-1] != arrays["values"].size:
        raise CorpusError(f"corpus file {name}: offsets do not match values")
    if arrays["flags"].shape != (n,) or arrays["split"].shape != (n,):
        raise CorpusError(f"corpus file {name}: flags/split must have one entry per run")
    return arrays


@functools.lru_cache(maxsize=None)
def corpus_bank(task_set: str, split: str, directory: Path = CORPUS_DIR) -> CurveBank:
    """A CurveBank of the corpus curves of ``task_set`` in ``split`` (``train`` or ``eval``)."""
    if task_set not in TASK_SET_FAMILIES:
        raise ValueError(f"no corpus for task set {task_set!r}; expected one of {sorted(TASK_SET_FAMILIES)}")
    if split not in SPLIT_CODES:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLIT_CODES)}")
    curves, family, flags = [], [], []
    for fam in TASK_SET_FAMILIES[task_set]:
        arrays = read_family(fam, directory)
        values = arrays["values"].astype(np.float64)
        offsets = arrays["offsets"]
        for i in np.flatnonzero(arrays["split"] == SPLIT_CODES[split]):
            curves.append(values[offsets[i] : offsets[i + 1]])
            family.append(fam)
            flags.append(int(arrays["flags"][i]))
    if not curves:
        raise CorpusError(f"the corpus has no {split} curves for task set {task_set!r}")
    return CurveBank(task_set, curves, family, flags)


def split_of(run_index: np.ndarray) -> np.ndarray:
    """0 (train) or 1 (eval) per run index."""
    return (np.asarray(run_index) % EVAL_EVERY == EVAL_EVERY - 1).astype(np.uint8)


def pack(src: Path, directory: Path = CORPUS_DIR) -> dict:
    """Pack every valid generator shard under ``src/shards`` into the committed float16 corpus."""
    shards = Path(src) / "shards"
    if not shards.is_dir():
        raise CorpusError(f"no generator shards under {shards}")
    files, families, runs = {}, {}, {}
    versions = None
    for fam_dir in sorted(p for p in shards.iterdir() if p.is_dir()):
        family = fam_dir.name
        entries, meta = [], []  # (run_index, float16 curve, flags)
        for npz in sorted(fam_dir.glob("shard_*.npz")):
            sidecar = json.loads(npz.with_suffix(".json").read_text())
            if sidecar.get("npz_sha256") != _sha256(npz):
                raise CorpusError(f"shard {npz} does not match its json checksum")
            with np.load(npz, allow_pickle=False) as archive:
                v, o = archive["values"].astype(np.float64), archive["offsets"]
                for i, run in enumerate(archive["run_index"]):
                    curve = np.nan_to_num(v[o[i] : o[i + 1]], nan=FLOAT16_MAX, posinf=FLOAT16_MAX)
                    if curve.size:
                        entries.append((int(run), np.clip(curve, LOSS_FLOOR, FLOAT16_MAX).astype(np.float16), int(archive["flags"][i])))
            meta.extend(sidecar.get("runs", []))
            versions = sidecar.get("versions", versions)
        if not entries:
            continue
        entries.sort(key=lambda entry: entry[0])
        run_index = np.array([e[0] for e in entries], dtype=np.int64)
        lengths = [e[1].size for e in entries]
        arrays = {"values": np.concatenate([e[1] for e in entries]), "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                  "run_index": run_index, "flags": np.array([e[2] for e in entries], dtype=np.uint8), "split": split_of(run_index)}
        files[f"{family}.npz"] = write_npz(directory / f"{family}.npz", arrays)
        split = arrays["split"]
        families[family] = {"task_set": next((t for t, f in TASK_SET_FAMILIES.items() if family in f), None),
                            "runs": int(run_index.size), "train": int((split == 0).sum()), "eval": int((split == 1).sum()),
                            "points": int(arrays["values"].size)}
        runs[family] = sorted(meta, key=lambda m: m.get("run_index", 0))
    runs_path = directory / "runs.json.gz"
    runs_path.write_bytes(gzip.compress(json.dumps(runs, sort_keys=True, separators=(",", ":")).encode(), mtime=0))
    files[runs_path.name] = _sha256(runs_path)
    manifest = {"format": 1, "eval_every": EVAL_EVERY, "files": files, "families": families, "generator_versions": versions}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    read_manifest.cache_clear()
    corpus_bank.cache_clear()
    return manifest


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Pack generator shards into the committed float16 corpus.")
    parser.add_argument("--src", default="corpus_build", type=Path)
    args = parser.parse_args()
    result = pack(args.src)
    for family, info in result["families"].items():
        print(f"{family:>18}: {info['runs']} runs ({info['train']} train / {info['eval']} eval), {info['points']} points")
