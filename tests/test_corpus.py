"""The committed real-curve corpus: integrity, checksums, split, loading, and regeneration."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from core_env.curves import corpus
from core_env.curves.bank import DIVERGED, LOSS_FLOOR, NON_LEARNER


@pytest.fixture(scope="module")
def manifest():
    return corpus.read_manifest()


def test_every_committed_file_matches_its_manifest_checksum(manifest):
    for name, digest in manifest["files"].items():
        assert corpus._sha256(corpus.CORPUS_DIR / name) == digest, name


def test_every_task_set_family_is_in_the_corpus(manifest):
    for task_set, families in corpus.TASK_SET_FAMILIES.items():
        for family in families:
            assert manifest["families"][family]["task_set"] == task_set


def test_family_arrays_have_consistent_shapes_flags_and_finite_values(manifest):
    for family, info in manifest["families"].items():
        arrays = corpus.read_family(family)
        n = arrays["run_index"].size
        assert n == info["runs"] and n > 0
        assert arrays["values"].dtype == np.float16
        assert arrays["offsets"][0] == 0 and np.all(np.diff(arrays["offsets"]) > 0)
        assert np.all(np.isfinite(arrays["values"].astype(np.float64)))
        assert np.all(arrays["values"].astype(np.float64) >= LOSS_FLOOR * 0.5)
        assert np.all((arrays["flags"] & ~np.uint8(DIVERGED | NON_LEARNER)) == 0)
        assert np.unique(arrays["run_index"]).size == n


def test_train_and_eval_splits_are_disjoint_and_both_present(manifest):
    for family in manifest["families"]:
        arrays = corpus.read_family(family)
        train = set(arrays["run_index"][arrays["split"] == 0].tolist())
        evaluation = set(arrays["run_index"][arrays["split"] == 1].tolist())
        assert train and evaluation and not train & evaluation
        assert np.array_equal(arrays["split"], corpus.split_of(arrays["run_index"]))


@pytest.mark.parametrize("task_set", sorted(corpus.TASK_SET_FAMILIES))
def test_banks_load_finite_curves_with_family_labels(task_set):
    for split in ("train", "eval"):
        bank = corpus.corpus_bank(task_set, split)
        assert len(bank) > 0
        assert np.all(np.isfinite(bank.values)) and np.all(bank.values > 0)
        assert set(bank.family) <= set(corpus.TASK_SET_FAMILIES[task_set])


def test_train_and_eval_banks_share_no_curve():
    train, evaluation = corpus.corpus_bank("id", "train"), corpus.corpus_bank("id", "eval")
    train_curves = {train.curve(i).tobytes() for i in range(len(train))}
    assert not any(evaluation.curve(i).tobytes() in train_curves for i in range(len(evaluation)))


def test_a_corrupted_corpus_file_raises_a_checksum_error(tmp_path, manifest):
    copy = tmp_path / "corpus"
    shutil.copytree(corpus.CORPUS_DIR, copy)
    name = "vit_digits.npz"
    data = bytearray((copy / name).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / name).write_bytes(bytes(data))
    with pytest.raises(corpus.CorpusError, match="checksum mismatch for corpus file vit_digits.npz"):
        corpus.read_family("vit_digits", copy)


def test_a_missing_manifest_raises_a_clear_error(tmp_path):
    with pytest.raises(corpus.CorpusError, match="manifest"):
        corpus.read_manifest(tmp_path)


def test_runs_metadata_lists_hyperparameters_for_every_run(manifest):
    import gzip

    runs = json.loads(gzip.decompress((corpus.CORPUS_DIR / "runs.json.gz").read_bytes()))
    for family, info in manifest["families"].items():
        assert len(runs[family]) == info["runs"]
        assert all("hp" in run and "lr" in run["hp"] for run in runs[family])


def test_regenerating_a_small_shard_reproduces_the_committed_curves():
    """Generator determinism against the committed data (needs the ``curves`` extra)."""
    pytest.importorskip("torch", reason="the curves extra (torch) is not installed")
    pytest.importorskip("sklearn", reason="the curves extra (scikit-learn) is not installed")
    from core_env.curves.generate import generate_shard

    family = "mlp_breast_cancer"
    fresh = generate_shard(family, 0, n_runs=3)
    arrays = corpus.read_family(family)
    for i, run in enumerate(fresh["run_index"]):
        j = int(np.flatnonzero(arrays["run_index"] == run)[0])
        committed = arrays["values"][arrays["offsets"][j] : arrays["offsets"][j + 1]].astype(np.float64)
        regenerated = np.clip(fresh["values"][fresh["offsets"][i] : fresh["offsets"][i + 1]].astype(np.float64), LOSS_FLOOR, corpus.FLOAT16_MAX)
        regenerated = regenerated.astype(np.float16).astype(np.float64)
        assert regenerated.shape == committed.shape
        # bit-identical on the same CPU and torch build; float16 rounding absorbs tiny cross-CPU drift
        np.testing.assert_allclose(regenerated, committed, rtol=2e-3, atol=1e-6)


@pytest.mark.parametrize("source", ["corpus", "prior"])
@pytest.mark.parametrize("task_set", sorted(corpus.TASK_SET_FAMILIES))
def test_task_sets_build_workloads_that_run_whole_episodes_with_every_heuristic(task_set, source):
    from benchmarks.rollout import run_agent
    from core_env.config import EnvConfig
    from core_env.curves import bank_for
    from core_env.workload import draw_workload
    from mara_agents.heuristics import HEURISTICS

    bank = bank_for(task_set, "train", source)
    rng = np.random.default_rng(3)
    workloads = [draw_workload(bank, 0.3, 150, rng) for _ in range(3)]
    for name, make in HEURISTICS.items():
        stats = run_agent(make(), workloads, EnvConfig(task_set=task_set, curve_source=source))
        assert np.all(stats["arrived"] == [len(w) for w in workloads]), name
        assert np.all((stats["completion_rate"] >= 0) & (stats["completion_rate"] <= 1)), name


@pytest.mark.parametrize("task_set", sorted(corpus.TASK_SET_FAMILIES))
def test_recorded_demands_match_the_curve_and_feasible_targets_are_reachable(task_set):
    from core_env.workload import load_suite

    workload = load_suite(task_set, "train", 0, 0)
    bank = workload.bank
    for i in range(len(workload)):
        curve, target, bps = int(workload.curve[i]), float(workload.target[i]), float(workload.batches_per_step[i])
        assert bank.demand(curve, target, bps) == workload.demand[i]
        if np.isfinite(workload.demand[i]):
            steps = int(workload.demand[i])
            reported = bank.reported_losses(curve, bps, steps=steps)
            assert reported[-1] <= target and np.all(reported[:-1] > target)


def test_the_prior_rejects_a_tampered_fit(tmp_path, monkeypatch):
    from core_env.curves import prior

    fit = tmp_path / "prior_fit.json"
    fit.write_text(prior.FIT_PATH.read_text().replace('"alpha"', '"alpha" ', 1))
    monkeypatch.setattr(prior, "FIT_PATH", fit)
    prior.read_fit.cache_clear()
    try:
        with pytest.raises(corpus.CorpusError, match="checksum mismatch for prior_fit.json"):
            prior.read_fit()
    finally:
        prior.read_fit.cache_clear()
