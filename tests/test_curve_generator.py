"""Tests of the real learning-curve generator (core_env.curves.generate); need the ``curves`` extra."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="curve generator needs torch (optional 'curves' extra)")
pytest.importorskip("sklearn", reason="curve generator needs scikit-learn (optional 'curves' extra)")

from core_env.curves import generate as G  # noqa: E402

FAMILY, STEPS, RPS = "mlp_wine", 150, 3


def _load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _check_consistent(arrays, n_runs):
    values, offsets, run_index, flags = arrays["values"], arrays["offsets"], arrays["run_index"], arrays["flags"]
    assert values.dtype == np.float32 and offsets.dtype == np.int64
    assert run_index.dtype == np.int64 and flags.dtype == np.uint8
    assert offsets.shape == (n_runs + 1,) and run_index.shape == (n_runs,) and flags.shape == (n_runs,)
    assert offsets[0] == 0 and offsets[-1] == values.size and np.all(np.diff(offsets) > 0)
    assert np.all(np.isfinite(values)) and np.all(values >= 0)
    assert np.all(flags <= (G.DIVERGED | G.NON_LEARNER))
    # an undiverged run has exactly the requested number of steps; a diverged one may be shorter
    lengths = np.diff(offsets)
    full = (flags & G.DIVERGED) == 0
    assert np.all(lengths[full] == STEPS) and np.all(lengths <= STEPS)


def test_shard_is_deterministic_and_consistent(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    G.write_shard(a, FAMILY, 1, runs_per_shard=RPS, steps=STEPS)
    G.write_shard(b, FAMILY, 1, runs_per_shard=RPS, steps=STEPS)
    npz_a, json_a = G.shard_paths(a, FAMILY, 1)
    npz_b, _ = G.shard_paths(b, FAMILY, 1)
    assert npz_a.read_bytes() == npz_b.read_bytes()  # byte-identical shard (fixed zip timestamps)
    za, zb = _load(npz_a), _load(npz_b)
    for k in ("values", "offsets", "run_index", "flags"):
        assert za[k].tobytes() == zb[k].tobytes()
    _check_consistent(za, RPS)
    assert za["run_index"].tolist() == [3, 4, 5]
    meta = json.loads(json_a.read_text())
    assert meta["npz_sha256"] == G.sha256_file(npz_a)
    assert meta["flags"] == za["flags"].tolist()
    assert [r["run_index"] for r in meta["runs"]] == [3, 4, 5]
    assert [r["steps"] for r in meta["runs"]] == np.diff(za["offsets"]).tolist()
    for key in ("torch", "numpy", "sklearn", "python"):
        assert meta["versions"][key]
    assert {"lr", "optimizer", "batch_size", "width", "depth"} <= set(meta["runs"][0]["hp"])


def test_generate_run_matches_shard_and_depends_on_index():
    v0, m0 = G.generate_run(FAMILY, 3, steps=STEPS)
    v0b, _ = G.generate_run(FAMILY, 3, steps=STEPS)
    v1, m1 = G.generate_run(FAMILY, 4, steps=STEPS)
    assert v0.dtype == np.float32 and v0.tobytes() == v0b.tobytes()
    assert m0["hp"] != m1["hp"] or v0.tobytes() != v1.tobytes()
    shard = G.generate_shard(FAMILY, 1, runs_per_shard=RPS, steps=STEPS)
    assert shard["values"][shard["offsets"][0]:shard["offsets"][1]].tobytes() == v0.tobytes()


def test_finalize_truncates_and_flags():
    from core_env.curves.runs.common import finalize

    values, flags, _ = finalize([2.3, 2.0, 1.5, 1.0, 0.5, 0.4, float("nan")], diverged=True)
    assert flags & G.DIVERGED and np.all(np.isfinite(values)) and values.size == 6
    values, flags, _ = finalize([2.3] * 20, diverged=False)
    assert flags == G.NON_LEARNER


def test_resume_skips_valid_and_redoes_corrupted(tmp_path):
    out = tmp_path / "corpus"
    argv = ["--out", str(out), "--families", FAMILY, "--runs", f"{FAMILY}=5", "--runs-per-shard", str(RPS),
            "--steps", str(STEPS), "--workers", "1", "--no-progress"]
    assert G.main(argv) == 0
    npz0, json0 = G.shard_paths(out, FAMILY, 0)
    npz1, json1 = G.shard_paths(out, FAMILY, 1)
    assert G.shard_is_valid(out, FAMILY, 0, [0, 1, 2], STEPS) and G.shard_is_valid(out, FAMILY, 1, [3, 4], STEPS)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["n_runs"] == 5 and {s["shard"] for s in manifest["shards"]} == {0, 1}
    assert all(s["sha256"] == G.sha256_file(out / s["npz"]) for s in manifest["shards"])
    good_npz, mtime0 = npz0.read_bytes(), json0.stat().st_mtime_ns

    npz1.write_bytes(npz1.read_bytes()[:-7] + b"corrupt")  # corrupt shard 1
    assert not G.shard_is_valid(out, FAMILY, 1, [3, 4], STEPS)
    assert G.main(argv) == 0
    assert json0.stat().st_mtime_ns == mtime0 and npz0.read_bytes() == good_npz  # shard 0 skipped
    assert G.shard_is_valid(out, FAMILY, 1, [3, 4], STEPS)  # shard 1 regenerated
    _check_consistent(_load(npz1), 2)
    # a different step count is not a match
    assert not G.shard_is_valid(out, FAMILY, 0, [0, 1, 2], STEPS + 1)
    # a missing json also forces a redo
    json1.unlink()
    assert G.write_shard(out, FAMILY, 1, RPS, n_runs=5, steps=STEPS)["skipped"] is False
    assert G.write_shard(out, FAMILY, 1, RPS, n_runs=5, steps=STEPS)["skipped"] is True
    assert not list(out.glob("shards/*/*.tmp-*"))


def test_plan_interleaves_families():
    runs = {"mlp_wine": 30, "charlm": 30, "rl_acrobot": 20}
    tasks = G.plan_tasks(runs, 10)
    assert {t[0] for t in tasks[:3]} == set(runs)  # every family in the first round
    assert tasks[0][0] == "mlp_wine"  # cheapest first
    assert sorted((f, k) for f, k, _ in tasks) == sorted((f, k) for f, n in runs.items() for k in range(-(-n // 10)))


def test_a_demand_that_would_walk_too_many_reports_is_refused_naming_the_rate():
    from core_env.curves import bank_for
    from core_env.curves.bank import MAX_DEMAND_WALK

    bank = bank_for("id", "train")
    assert bank.demands(np.array([0]), np.array([0.5]), np.array([1.0]))[0] > 0  # an ordinary rate
    with pytest.raises(ValueError, match=rf"would walk .* reports \(at most {MAX_DEMAND_WALK:,}\); the slowest trains 1e-09 batches"):
        bank.demands(np.array([0, 1]), np.array([0.5, 0.5]), np.array([1e-9, 1.0]))
