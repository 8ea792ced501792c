"""Real learning-curve generator: small CPU training runs -> sharded, resumable ``.npz`` corpus.

Every curve is the per-step mini-batch *training* loss of a real run (RL: ``1 - normalised mean
episodic return`` per update). A run is fully determined by ``(family, run_index)``: its seed is
derived from both, torch runs with one thread, so the same torch version on the same CPU reproduces
it bit for bit. Families and their default sizes are in :mod:`core_env.curves.runs`.

Output layout (``--out``, default ``corpus_build``)::

    shards/{family}/shard_{k:03d}.npz   values float32 (all curves concatenated), offsets int64 (n+1),
                                        run_index int64 (n), flags uint8 (n; 1 = diverged, 2 = non-learner)
    shards/{family}/shard_{k:03d}.json  per-run hyperparameters, steps, wall seconds, flags, versions, npz sha256
    manifest.json                       summary of all valid shards (rewritten after each shard)

Usage::

    python -m core_env.curves.generate --out corpus_build --families all --workers 2
    python -m core_env.curves.generate --runs mlp_digits=150,charlm=180 --families mlp_digits,charlm
    python -m core_env.curves.generate --benchmark 2          # time 2 runs per family, write nothing

Interrupting loses at most the shards in progress; a restart skips every shard whose json + npz exist,
match the requested runs/steps and whose npz sha256 matches the json.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a script path: make ``core_env`` importable
    import sys as _sys
    from pathlib import Path as _Path

    _sys.path.insert(0, str(_Path(__file__).resolve().parents[2]))

import argparse
import hashlib
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from core_env.curves.runs import FAMILIES
from core_env.extras import needs
from core_env.npz import npz_bytes, write_atomic
from core_env.curves.runs import common as C

FORMAT = "core_env.curves.shard/1"
RUNS_PER_SHARD = 10
DEFAULT_OUT = "corpus_build"
DIVERGED, NON_LEARNER = C.DIVERGED, C.NON_LEARNER


# ------------------------------------------------------------------------------------------ runs
def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {sorted(FAMILIES)}")


def generate_run(family: str, run_index: int, steps: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Train one run of ``family`` and return (float32 per-step losses, metadata).

    ``steps`` overrides the family's step count (tests); hyperparameters and seeds do not depend on it.
    The values are finite; a diverged run is truncated at its last finite point and flagged.
    """
    _check_family(family)
    fam = FAMILIES[family]
    n_steps = fam.steps if steps is None else int(steps)
    seeds = C.RunSeeds(family, int(run_index))
    module = importlib.import_module(f"core_env.curves.runs.{fam.module}")
    t0 = time.perf_counter()
    out = module.run(family, seeds, n_steps)
    wall = time.perf_counter() - t0
    values, flags, stats = C.finalize(out["losses"], out["diverged"])
    meta = {
        "family": family,
        "run_index": int(run_index),
        "seed_entropy": seeds.entropy(),
        "torch_seed": seeds.torch_seed,
        "task_set": fam.task_set,
        "hp": out["hp"],
        "steps_planned": n_steps,
        "steps": int(values.size),
        "wall_s": round(wall, 4),
        "flags": flags,
        "diverged": bool(flags & DIVERGED),
        "non_learner": bool(flags & NON_LEARNER),
        "diverged_reason": out.get("reason", ""),
        "stats": stats,
        "eval": out.get("eval", {}),
        "n_params": int(out.get("n_params", 0)),
    }
    if "text" in out:
        meta["text"] = out["text"]
    return values, meta


def shard_run_indices(shard_index: int, runs_per_shard: int = RUNS_PER_SHARD, n_runs: int | None = None) -> list[int]:
    """Run indices of shard ``shard_index``: ``[k*rps, min((k+1)*rps, n_runs))``."""
    start = shard_index * runs_per_shard
    stop = start + runs_per_shard if n_runs is None else min(start + runs_per_shard, n_runs)
    return list(range(start, stop))


def generate_shard(
    family: str, shard_index: int, runs_per_shard: int = RUNS_PER_SHARD, n_runs: int | None = None, steps: int | None = None
) -> dict[str, Any]:
    """Generate one shard in memory: ``{"values", "offsets", "run_index", "flags", "runs", "wall_s"}``."""
    _check_family(family)
    indices = shard_run_indices(shard_index, runs_per_shard, n_runs)
    t0 = time.perf_counter()
    curves, metas = [], []
    for i in indices:
        values, meta = generate_run(family, i, steps)
        curves.append(values)
        metas.append(meta)
    lengths = np.array([c.size for c in curves], dtype=np.int64)
    return {
        "values": np.concatenate(curves).astype(np.float32) if curves else np.zeros(0, np.float32),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "run_index": np.asarray(indices, dtype=np.int64),
        "flags": np.asarray([m["flags"] for m in metas], dtype=np.uint8),
        "runs": metas,
        "wall_s": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------------------- storage
def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "numpy": np.__version__, "platform": platform.platform(),
           "machine": platform.machine()}
    for name, mod in [("torch", "torch"), ("sklearn", "sklearn"), ("gymnasium", "gymnasium")]:
        try:
            out[name] = importlib.import_module(mod).__version__
        except Exception:  # pragma: no cover - optional
            out[name] = None
    try:
        from importlib.metadata import version

        out["mnist1d"] = version("mnist1d")
    except Exception:  # pragma: no cover - optional
        out["mnist1d"] = None
    return out


def shard_paths(out: str | os.PathLike, family: str, shard_index: int) -> tuple[Path, Path]:
    d = Path(out) / "shards" / family
    return d / f"shard_{shard_index:03d}.npz", d / f"shard_{shard_index:03d}.json"


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def shard_is_valid(out: str | os.PathLike, family: str, shard_index: int, run_indices: list[int] | None = None,
                   steps: int | None = None) -> bool:
    """True when json + npz exist, the npz hash matches and (if given) the run indices and steps match."""
    npz, js = shard_paths(out, family, shard_index)
    if not (npz.is_file() and js.is_file()):
        return False
    try:
        meta = json.loads(js.read_text())
    except (OSError, ValueError):
        return False
    if meta.get("format") != FORMAT or meta.get("npz_sha256") != sha256_file(npz):
        return False
    if run_indices is not None and meta.get("run_index") != list(run_indices):
        return False
    if meta.get("steps_override") != (None if steps is None else int(steps)):
        return False
    return True


def write_shard(out: str | os.PathLike, family: str, shard_index: int, runs_per_shard: int = RUNS_PER_SHARD,
                n_runs: int | None = None, steps: int | None = None, force: bool = False) -> dict[str, Any]:
    """Generate and atomically write one shard (npz, then json); skip it when a valid copy exists.

    Returns a summary dict with ``skipped`` True/False.
    """
    with needs(__name__, "curves"):
        import torch

    indices = shard_run_indices(shard_index, runs_per_shard, n_runs)
    npz, js = shard_paths(out, family, shard_index)
    if not force and shard_is_valid(out, family, shard_index, indices, steps):
        meta = json.loads(js.read_text())
        return {"family": family, "shard": shard_index, "skipped": True, "n_runs": len(indices),
                "wall_s": 0.0, "flags": meta.get("flags", [])}
    torch.set_num_threads(1)
    shard = generate_shard(family, shard_index, runs_per_shard, n_runs, steps)
    arrays = {k: shard[k] for k in ("values", "offsets", "run_index", "flags")}
    assert np.all(np.isfinite(arrays["values"])), "non-finite values must never be written"
    data = npz_bytes(arrays)
    write_atomic(npz, data)
    meta = {
        "format": FORMAT,
        "family": family,
        "task_set": FAMILIES[family].task_set,
        "shard": shard_index,
        "runs_per_shard": runs_per_shard,
        "run_index": indices,
        "n_runs": len(indices),
        "steps": FAMILIES[family].steps if steps is None else int(steps),
        "steps_override": None if steps is None else int(steps),
        "n_points": int(arrays["values"].size),
        "flags": [int(f) for f in arrays["flags"]],
        "flag_bits": {"diverged": DIVERGED, "non_learner": NON_LEARNER},
        "npz": npz.name,
        "npz_sha256": hashlib.sha256(data).hexdigest(),
        "values_sha256": hashlib.sha256(arrays["values"].tobytes()).hexdigest(),
        "wall_s": round(shard["wall_s"], 3),
        "torch_threads": torch.get_num_threads(),
        "versions": versions(),
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": shard["runs"],
    }
    write_atomic(js, (json.dumps(meta, indent=1, sort_keys=False) + "\n").encode())
    return {"family": family, "shard": shard_index, "skipped": False, "n_runs": len(indices),
            "wall_s": shard["wall_s"], "flags": meta["flags"]}


def write_manifest(out: str | os.PathLike, planned: dict[str, int] | None = None) -> dict[str, Any]:
    """Rewrite ``manifest.json`` from every shard json whose npz hash matches."""
    root = Path(out)
    shards, fams = [], {}
    for js in sorted(root.glob("shards/*/shard_*.json")):
        try:
            meta = json.loads(js.read_text())
        except (OSError, ValueError):
            continue
        npz = js.with_name(meta.get("npz", ""))
        if meta.get("format") != FORMAT or not npz.is_file() or sha256_file(npz) != meta.get("npz_sha256"):
            continue
        fam = meta["family"]
        flags = np.asarray(meta["flags"], dtype=np.uint8)
        shards.append({"family": fam, "shard": meta["shard"], "n_runs": meta["n_runs"],
                       "run_index_first": meta["run_index"][0] if meta["run_index"] else None,
                       "run_index_last": meta["run_index"][-1] if meta["run_index"] else None,
                       "steps": meta["steps"], "steps_override": meta.get("steps_override"),
                       "n_points": meta["n_points"], "npz": str(npz.relative_to(root)),
                       "json": str(js.relative_to(root)), "sha256": meta["npz_sha256"]})
        f = fams.setdefault(fam, {"task_set": meta.get("task_set"), "shards": 0, "runs": 0, "points": 0,
                                  "diverged": 0, "non_learner": 0, "wall_s": 0.0, "versions": meta.get("versions")})
        f["shards"] += 1
        f["runs"] += meta["n_runs"]
        f["points"] += meta["n_points"]
        f["diverged"] += int(np.count_nonzero(flags & DIVERGED))
        f["non_learner"] += int(np.count_nonzero(flags & NON_LEARNER))
        f["wall_s"] = round(f["wall_s"] + meta.get("wall_s", 0.0), 3)
    for fam, f in fams.items():
        if planned and fam in planned:
            f["runs_planned"] = planned[fam]
    manifest = {"format": "core_env.curves.manifest/1", "updated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "flag_bits": {"diverged": DIVERGED, "non_learner": NON_LEARNER},
                "n_shards": len(shards), "n_runs": sum(s["n_runs"] for s in shards),
                "n_points": sum(s["n_points"] for s in shards), "families": fams, "shards": shards}
    if planned:
        manifest["planned"] = planned
    write_atomic(root / "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


# ------------------------------------------------------------------------------------------ plan
def plan_tasks(runs: dict[str, int], runs_per_shard: int = RUNS_PER_SHARD) -> list[tuple[str, int, int]]:
    """(family, shard, n_runs) in execution order.

    Fair share by estimated cost: a shard's key is the estimated CPU time its family has already been
    given, so every family gets its shard 0 in the first round (a partial corpus has all families),
    and cheap families finish early while the expensive ones share the rest of the time.
    """
    order = sorted(runs, key=lambda f: (FAMILIES[f].est_seconds, f))
    keyed = []
    for rank, fam in enumerate(order):
        n_shards = -(-runs[fam] // runs_per_shard)
        cost = FAMILIES[fam].est_seconds * runs_per_shard
        for k in range(n_shards):
            keyed.append(((k * cost, rank), (fam, k, runs[fam])))
    return [task for _, task in sorted(keyed)]


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with needs(__name__, "curves"):
        import torch

    torch.set_num_threads(1)


def _work(task: tuple[str, str, int, int, int, int | None]) -> dict[str, Any]:
    out, family, shard, rps, n_runs, steps = task
    try:
        return write_shard(out, family, shard, rps, n_runs, steps)
    except Exception as exc:  # keep the pool alive; the shard is redone on the next start
        import traceback

        return {"family": family, "shard": shard, "skipped": False, "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(), "n_runs": 0, "wall_s": 0.0, "flags": []}


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _interruptible() -> None:
    """SIGTERM and SIGINT (even when ignored, as for ``nohup ... &``) stop the job cleanly."""
    import signal

    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)


def _parse_runs(text: str | None) -> dict[str, int]:
    runs: dict[str, int] = {}
    for part in filter(None, (text or "").split(",")):
        name, _, n = part.partition("=")
        _check_family(name.strip())
        runs[name.strip()] = int(n)
    return runs


def _fmt(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m core_env.curves.generate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: corpus_build)")
    p.add_argument("--families", default="all", help="'all' or a comma list of " + ",".join(FAMILIES))
    p.add_argument("--runs", default="", help="per-family run counts, e.g. mlp_digits=150,charlm=180 (others: defaults)")
    p.add_argument("--runs-per-shard", type=int, default=RUNS_PER_SHARD)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=None, help="override steps per run for every family (testing only)")
    p.add_argument("--benchmark", type=int, default=0, metavar="N", help="time N runs per family and exit (no output)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar (plain log lines only)")
    args = p.parse_args(argv)

    fams = list(FAMILIES) if args.families == "all" else [f.strip() for f in args.families.split(",") if f.strip()]
    for f in fams:
        _check_family(f)
    overrides = _parse_runs(args.runs)
    runs = {f: overrides.get(f, FAMILIES[f].default_runs) for f in fams}
    runs = {f: n for f, n in runs.items() if n > 0}

    if args.benchmark:
        with needs(__name__, "curves"):
            import torch

        torch.set_num_threads(1)
        for f in fams:
            times = []
            for i in range(args.benchmark):
                values, meta = generate_run(f, i, args.steps)
                times.append(meta["wall_s"])
                print(f"{f:18s} run {i}: {meta['wall_s']:7.2f} s  steps {meta['steps']:5d}  flags {meta['flags']}  "
                      f"loss {meta['stats'].get('initial_smoothed', float('nan')):.3f} -> "
                      f"{meta['stats'].get('final_smoothed', float('nan')):.3f}  {meta['hp']['optimizer']} lr {meta['hp']['lr']:.2g}",
                      flush=True)
            print(f"{f:18s} mean {np.mean(times):.2f} s/run", flush=True)
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("shards/*/*.tmp-*"):  # leftovers of an interrupted run
        try:
            stale.unlink()
        except OSError:
            pass
    tasks = plan_tasks(runs, args.runs_per_shard)
    todo = [t for t in tasks if not shard_is_valid(out, t[0], t[1], shard_run_indices(t[1], args.runs_per_shard, t[2]), args.steps)]
    est = sum(FAMILIES[f].est_seconds * len(shard_run_indices(k, args.runs_per_shard, n)) for f, k, n in todo)
    print(f"curve generator: {sum(runs.values())} runs in {len(tasks)} shards ({len(tasks) - len(todo)} already valid), "
          f"{len(todo)} to do, workers={args.workers}, estimated {est / 60:.0f} core-min / "
          f"{est / 60 / max(1, args.workers):.0f} min wall; runs: " + ",".join(f"{f}={n}" for f, n in runs.items()), flush=True)
    write_manifest(out, runs)
    if not todo:
        return 0

    work = [(str(out), f, k, args.runs_per_shard, n, args.steps) for f, k, n in todo]
    _interruptible()
    t0, done, errors = time.time(), 0, 0
    bar = None
    if not args.no_progress:
        with needs(__name__, "curves"):
            from tqdm import tqdm

        bar = tqdm(total=len(work), unit="shard", mininterval=5.0, file=sys.stderr)

    def report(res: dict[str, Any]) -> None:
        nonlocal done, errors
        done += 1
        if "error" in res:
            errors += 1
            print(f"[{done}/{len(work)}] {res['family']} shard {res['shard']:03d} FAILED: {res['error']}\n{res.get('traceback', '')}",
                  flush=True)
        else:
            flags = np.asarray(res["flags"], dtype=np.uint8)
            print(f"[{done}/{len(work)}] {res['family']} shard {res['shard']:03d}: {res['n_runs']} runs in {res['wall_s']:.1f} s "
                  f"(diverged {int(np.count_nonzero(flags & DIVERGED))}, non-learner {int(np.count_nonzero(flags & NON_LEARNER))}) "
                  f"elapsed {_fmt(time.time() - t0)}", flush=True)
        write_manifest(out, runs)
        if bar is not None:
            bar.update(1)

    try:
        if args.workers <= 1:
            _worker_init()
            for task in work:
                report(_work(task))
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            with ctx.Pool(args.workers, initializer=_worker_init) as pool:  # exit terminates the workers
                for res in pool.imap_unordered(_work, work, chunksize=1):
                    report(res)
    except KeyboardInterrupt:
        print(f"interrupted after {done} shards; rerun the same command to resume", flush=True)
        return 130
    if bar is not None:
        bar.close()
    print(f"done: {done - errors} shards written, {errors} failed, wall {_fmt(time.time() - t0)}; manifest {out / 'manifest.json'}",
          flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
