"""MARA's flow-matching predictor: decoding, sampling, training, checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core_env.curves import CurveBank
from mara_agents.predictors import train_fm
from mara_agents.predictors.flow_matching import (
    BIN_WIDTHS,
    DEFAULT_CHECKPOINT,
    FORMAT,
    HORIZON,
    FlowConfig,
    FlowMatchingPredictor,
    FlowModel,
    decode_crossings,
    equal_weight_quantiles,
    history_features,
    load_model,
    pack_histories,
    reachability_weights,
    save_model,
    summarize_samples,
    synthetic_histories,
    weighted_quantiles,
)
from mara_agents.protocols import QUANTILE_LEVELS, DemandSummary, Predictor

CENTERS = FlowConfig().bin_centers
TINY = FlowConfig(history_steps=8, gru_hidden=8, context=16, velocity_hidden=32)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_model(seed: int = 0) -> FlowModel:
    """An untrained tiny model with non-trivial normalization (outputs depend on every buffer)."""
    model = FlowModel(TINY, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    model.set_normalization(torch.randn(64, model.summary_mean.numel(), generator=generator),
                            -torch.rand(64, len(TINY.bin_widths), generator=generator).cumsum(1))
    return model.eval()


# ------------------------------------------------------------------ decoding


def test_bin_layout_covers_the_horizon_with_unit_bins_first():
    assert len(BIN_WIDTHS) == 32 and sum(BIN_WIDTHS) == HORIZON == 120
    assert CENTERS[:8].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]  # a 1-step bin sits on its step
    assert CENTERS[8] == 9.5 and CENTERS[-1] == 116.5


def test_decoding_a_unit_bin_crossing_gives_the_step_of_the_first_report_at_or_below_target():
    future = -0.1 * np.arange(1, 33)  # report j (1-based) is 0.1·j below the current log loss
    assert decode_crossings(future, -0.35) == 4.0
    assert decode_crossings(future, -0.4) == 4.0  # reaching the target exactly counts
    assert decode_crossings(future, -0.05) == 1.0
    assert decode_crossings(future, -0.8) == 8.0


def test_decoding_a_straight_line_interpolates_exactly_inside_wide_bins():
    future = -0.01 * CENTERS  # the bin means of a line are its values at the bin centres
    assert decode_crossings(future, -0.5) == 50.0
    assert decode_crossings(future, -0.3) == 30.0
    assert decode_crossings(future, -1.1) == 110.0


def test_a_future_that_never_reaches_the_target_is_censored():
    future = -0.01 * CENTERS
    assert decode_crossings(future, -2.0) == np.inf
    assert decode_crossings(np.zeros(32), -1e-3) == np.inf


def test_a_target_at_or_above_the_current_loss_is_reached_by_the_next_report():
    assert decode_crossings(-0.01 * CENTERS, 0.0) == 1.0
    assert decode_crossings(-0.01 * CENTERS, 0.5) == 1.0


def test_decoding_broadcasts_thresholds_over_samples():
    futures = np.stack([-0.1 * np.arange(1, 33), -0.2 * np.arange(1, 33)])[None].repeat(3, axis=0)  # (3, 2, 32)
    out = decode_crossings(futures, np.array([[-0.35], [-0.8], [-100.0]]))
    assert out.tolist() == [[4.0, 2.0], [8.0, 4.0], [np.inf, np.inf]]


def test_decoding_the_simulated_future_reproduces_the_environments_demand():
    """Examples simulated for training decode to the bank's demand exactly while it lies in unit bins."""
    t = np.arange(400.0)
    bank = CurveBank("hand", [2.0 / (1.0 + t / 7.0), 1.0 + 0.5 * np.exp(-t / 30.0)], ["a", "b"])
    examples = train_fm.simulate_examples(bank, 2000, np.random.default_rng(0), BIN_WIDTHS)
    current = np.log([h[-1] for h in examples.histories])
    decoded = decode_crossings(examples.future, np.log(examples.target) - current)
    near = examples.remaining <= 8
    assert near.sum() > 100
    np.testing.assert_array_equal(decoded[near], examples.remaining[near])


def test_simulated_histories_are_the_nominal_reports_of_their_task():
    t = np.arange(300.0)
    bank = CurveBank("hand", [1.0 / (1.0 + t / 5.0)], ["a"])
    examples = train_fm.simulate_examples(bank, 50, np.random.default_rng(1), BIN_WIDTHS)
    assert all(h.size >= 1 and np.all(h > 0) for h in examples.histories)
    assert np.all(examples.remaining >= 1) and np.all(examples.budget >= 1)
    assert examples.future.shape == (50, 32) and np.all(np.isfinite(examples.future))


# ------------------------------------------------------------------ summaries


def test_equal_weights_give_nearest_rank_quantiles():
    samples = np.array([[3.0, 1.0, 2.0, 4.0, np.inf]])
    weights = np.ones_like(samples)
    assert weighted_quantiles(samples, weights, (0.1, 0.5, 0.8, 0.81)).tolist() == [[1.0, 3.0, 4.0, np.inf]]


@pytest.mark.parametrize("size", [1, 5, 16, 32, 33])
def test_the_equal_weight_path_gives_the_weighted_numbers(size):
    rng = np.random.default_rng(size)
    samples = np.ceil(rng.exponential(30.0, (200, size)))
    samples[rng.random(samples.shape) < 0.3] = np.inf
    levels = (*QUANTILE_LEVELS, 0.0, 0.5, 0.81, 1.0)
    np.testing.assert_array_equal(equal_weight_quantiles(samples, levels), weighted_quantiles(samples, np.ones(samples.shape), levels))
    budgets = rng.uniform(0.0, 100.0, (200, 3))
    within = ((samples[:, None, :] <= budgets[:, :, None]) * 1.0).sum(axis=2) / size
    np.testing.assert_array_equal(summarize_samples(samples, budgets, np.asarray(QUANTILE_LEVELS)).p_within_budget, within)


def test_the_reachability_prior_moves_weight_between_crossing_and_censored_samples():
    samples = np.array([[2.0, np.inf, np.inf, np.inf], [1.0, 2.0, 3.0, 4.0], [np.inf] * 4])
    weights = reachability_weights(samples, 0.9)
    np.testing.assert_allclose(weights[0], [3.6, 0.1 / 0.75, 0.1 / 0.75, 0.1 / 0.75])
    np.testing.assert_array_equal(weights[1:], 1.0)  # nothing to move when all or none cross
    summary = summarize_samples(samples, np.array([2, 2, 2]), np.asarray(QUANTILE_LEVELS), reachable=0.9)
    assert summary.median.tolist() == [2.0, 2.0, np.inf]
    np.testing.assert_allclose(summary.p_within_budget, [0.9, 0.5, 0.0])
    plain = summarize_samples(samples, np.array([2, 2, 2]), np.asarray(QUANTILE_LEVELS))
    assert plain.median.tolist() == [np.inf, 2.0, np.inf]
    np.testing.assert_allclose(plain.p_within_budget, [0.25, 0.5, 0.0])


def test_p_within_budget_takes_one_column_per_budget():
    samples = np.array([[1.0, 2.0, 3.0, np.inf]])
    summary = summarize_samples(samples, np.array([[0, 1, 2, 120]]), np.asarray(QUANTILE_LEVELS))
    np.testing.assert_allclose(summary.p_within_budget, [[0.0, 0.25, 0.5, 0.75]])


# ------------------------------------------------------------------ the predictor


def test_predictor_follows_the_predictor_protocol():
    predictor = FlowMatchingPredictor(tiny_model(), samples=8, ode_steps=2)
    histories, targets, budgets = synthetic_histories(20, seed=3)
    summary = predictor.predict(histories, targets, budgets)
    assert isinstance(predictor, Predictor) and isinstance(summary, DemandSummary)
    assert predictor.horizon == HORIZON
    assert summary.median.shape == (20,) and summary.quantiles.shape == (20, len(QUANTILE_LEVELS))
    assert np.all(np.diff(summary.quantiles, axis=1) >= 0)
    assert np.all((summary.median >= 1) & ((summary.median <= HORIZON) | np.isinf(summary.median)))
    assert np.all((summary.p_within_budget >= 0) & (summary.p_within_budget <= 1))


def test_a_task_without_reports_is_censored():
    predictor = FlowMatchingPredictor(tiny_model(), samples=8, ode_steps=2)
    summary = predictor.predict([np.zeros(0), np.array([1.0, 0.9])], np.array([0.5, 0.5]), np.array([10, 10]))
    assert summary.median[0] == np.inf and summary.p_within_budget[0] == 0.0
    assert np.all(np.isinf(summary.quantiles[0]))


def test_predictions_are_a_pure_function_of_the_history():
    predictor = FlowMatchingPredictor(tiny_model(), samples=16, ode_steps=3)
    histories, targets, budgets = synthetic_histories(6, seed=4)
    first = predictor.predict(histories, targets, budgets)
    again = predictor.predict(histories, targets, budgets)
    alone = predictor.predict(histories[2:3], targets[2:3], budgets[2:3])
    np.testing.assert_array_equal(first.quantiles, again.quantiles)
    np.testing.assert_array_equal(first.quantiles[2:3], alone.quantiles)


@pytest.mark.parametrize("solver", ["euler", "midpoint"])
def test_sampling_constants_computed_once_give_the_same_futures(solver):
    """The predictor computes the time biases and the projected noise once; sampling from scratch agrees."""
    predictor = FlowMatchingPredictor(tiny_model(), samples=16, ode_steps=3, solver=solver)
    histories, _, _ = synthetic_histories(5, seed=7)
    futures, _ = predictor.sample_futures(histories)
    steps, summary, _ = history_features(*pack_histories(histories), predictor.model.config)
    with torch.no_grad():
        scratch = predictor.model.sample(torch.from_numpy(steps), torch.from_numpy(summary), predictor.noise, 3, solver)
    np.testing.assert_allclose(futures, scratch.numpy(), rtol=1e-6, atol=1e-6)


def test_invalid_sampling_settings_raise():
    with pytest.raises(ValueError, match="samples"):
        FlowMatchingPredictor(tiny_model(), samples=0)
    with pytest.raises(ValueError, match="ode_steps"):
        FlowMatchingPredictor(tiny_model(), ode_steps=1.5)
    with pytest.raises(ValueError, match="reachable"):
        FlowMatchingPredictor(tiny_model(), reachable=1.5)
    with pytest.raises(ValueError, match="resolution"):
        FlowConfig(resolution=0.0)


# ------------------------------------------------------------------ learning


def bimodal_examples(count: int, rng: np.random.Generator) -> train_fm.Examples:
    """Uninformative noisy flat histories; the future either falls 0.2 per step (mode A, reaches
    -1 at step 5) or stays flat (mode B, never reaches -1), with equal probability."""
    histories = np.empty(count, dtype=object)
    histories[:] = [np.exp(rng.normal(0.0, 0.01, size=n)) for n in rng.integers(1, 12, size=count)]
    falls = rng.random(count) < 0.5
    future = np.where(falls[:, None], np.maximum(-0.2 * CENTERS, -3.0), 0.0) + rng.normal(0.0, 0.005, (count, 32))
    return train_fm.Examples(histories=histories, future=future, target=np.ones(count),
                             budget=np.full(count, 50.0), remaining=np.where(falls, 5.0, np.inf))


def test_cfm_learns_a_bimodal_future_where_a_point_forecast_gives_one_wrong_point():
    rng = np.random.default_rng(0)
    examples = bimodal_examples(4000, rng)
    model = FlowModel(FlowConfig(history_steps=8, gru_hidden=8, context=16, velocity_hidden=64), seed=0)
    train_fm.fit(model, examples, steps=800, batch=128, draws=4, lr=3e-3, seed=0, progress=False)
    predictor = FlowMatchingPredictor(model, samples=256, ode_steps=16, seed=1)
    futures, _ = predictor.sample_futures([np.exp(rng.normal(0.0, 0.01, size=6))])
    crossings = decode_crossings(futures[0], -1.0)
    falls = np.isfinite(crossings)
    assert 0.3 < falls.mean() < 0.7  # both modes are sampled ...
    assert np.mean(np.abs(crossings[falls] - 5.0) <= 2.0) > 0.8  # ... and the falling one crosses where it should
    point = decode_crossings(examples.future.mean(axis=0), -1.0)  # the MSE-optimal point forecast
    assert 9.0 <= point <= 11.0  # one crossing, in neither mode
    assert np.mean(np.abs(crossings - point) <= 2.0) < 0.1


def test_training_is_deterministic_and_leaves_the_global_generators_alone():
    torch_state, numpy_state = torch.random.get_rng_state(), np.random.get_state()[1].copy()
    examples = bimodal_examples(500, np.random.default_rng(2))
    weights = []
    for _ in range(2):
        model = FlowModel(TINY, seed=3)
        train_fm.fit(model, examples, steps=20, batch=32, seed=4, progress=False)
        weights.append(torch.cat([p.detach().flatten() for p in model.state_dict().values()]))
    FlowMatchingPredictor(model, samples=4, ode_steps=2).predict(*synthetic_histories(8))
    assert torch.equal(weights[0], weights[1])
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], numpy_state)


# ------------------------------------------------------------------ checkpoints


def test_save_and_load_round_trip_gives_identical_predictions(tmp_path):
    model = tiny_model(seed=5)
    manifest = save_model(model, tmp_path / "fm.pt", {"seed": 5})
    loaded, read = load_model(tmp_path / "fm.pt")
    assert read == manifest and read["format"] == FORMAT and read["config"] == TINY.to_dict()
    histories, targets, budgets = synthetic_histories(32, seed=6)
    before = FlowMatchingPredictor(model, samples=16, ode_steps=4).predict(histories, targets, budgets)
    after = FlowMatchingPredictor(loaded, samples=16, ode_steps=4).predict(histories, targets, budgets)
    for field in ("median", "quantiles", "p_within_budget"):
        np.testing.assert_array_equal(getattr(before, field), getattr(after, field))


def test_a_corrupt_weights_file_fails_its_checksum(tmp_path):
    save_model(tiny_model(), tmp_path / "fm.pt")
    data = bytearray((tmp_path / "fm.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "fm.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_model(tmp_path / "fm.pt")


def test_weights_that_do_not_fit_the_manifest_config_raise(tmp_path):
    save_model(tiny_model(), tmp_path / "fm.pt")
    path = tmp_path / "fm.json"
    manifest = json.loads(path.read_text())
    manifest["config"]["velocity_hidden"] = 48
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="does not match its config"):
        load_model(tmp_path / "fm.pt")


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(format="something/else"), "not a flow-matching checkpoint"),
    (lambda m: m["config"].update(colour="blue"), "config keys"),
    (lambda m: m["config"].update(history_steps=0), "history_steps"),
])
def test_a_mismatched_manifest_raises_a_clear_error(tmp_path, edit, message):
    save_model(tiny_model(), tmp_path / "fm.pt")
    path = tmp_path / "fm.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=message):
        load_model(tmp_path / "fm.pt")


def test_non_finite_weights_are_refused_on_save_and_on_load(tmp_path):
    import hashlib

    model = tiny_model()
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        save_model(model, tmp_path / "fm.pt")
    assert not (tmp_path / "fm.pt").exists() and not (tmp_path / "fm.json").exists()  # nothing written
    # NaN weights behind a manifest whose sha256 matches them (the checksum alone would accept them)
    save_model(tiny_model(), tmp_path / "fm.pt")
    torch.save(model.state_dict(), tmp_path / "fm.pt")
    manifest = json.loads((tmp_path / "fm.json").read_text())
    manifest["sha256"] = hashlib.sha256((tmp_path / "fm.pt").read_bytes()).hexdigest()
    (tmp_path / "fm.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="non-finite"):
        load_model(tmp_path / "fm.pt")


def test_missing_checkpoint_files_raise(tmp_path):
    with pytest.raises(ValueError, match="missing"):
        load_model(tmp_path / "nothing.pt")
    save_model(tiny_model(), tmp_path / "fm.pt")
    (tmp_path / "fm.json").unlink()
    with pytest.raises(ValueError, match="manifest .* is missing"):
        load_model(tmp_path / "fm.pt")


def test_the_shipped_checkpoint_was_trained_on_id_train_curves_and_predicts():
    model, manifest = load_model(DEFAULT_CHECKPOINT)
    assert manifest["data"]["task_set"] == "id" and manifest["data"]["split"] == "train"
    predictor = FlowMatchingPredictor.load()
    assert predictor.samples == manifest["inference"]["samples"]
    histories, targets, budgets = synthetic_histories(64, seed=7)
    summary = predictor.predict(histories, targets, budgets)
    assert summary.median.shape == (64,) and not np.any(np.isnan(summary.quantiles))


def test_per_step_examples_weigh_each_task_by_the_node_steps_it_runs():
    """With per_step > 0 a task gives examples in proportion to min(demand, window) − 1 (the steps a scheduler
    decides on it): the per-step mean demand equals the one-per-task examples' demand reweighted by that count."""
    t = np.arange(600.0)
    bank = CurveBank("hand", [2.0 / (1.0 + t / s) for s in (2.0, 6.0, 20.0, 60.0)], ["a", "a", "b", "b"])
    once = train_fm.simulate_examples(bank, 20000, np.random.default_rng(3), (1,))
    stepped = train_fm.simulate_examples(bank, 20000, np.random.default_rng(4), (1,), per_step=0.2)

    def demand_and_limit(ex):
        h = np.array([len(x) for x in ex.histories], dtype=float)
        demand = np.minimum(ex.remaining + h, 1000.0)
        return demand, np.minimum(demand, ex.budget + h) - 1.0

    d_once, limit = demand_and_limit(once)
    d_step, _ = demand_and_limit(stepped)
    reweighted = float(np.sum(d_once * limit) / np.sum(limit))
    assert d_step.mean() > d_once.mean() * 1.2  # long tasks weigh more (the check can fail if per_step is ignored)
    assert abs(d_step.mean() - reweighted) < 0.03 * reweighted
    assert len(stepped) == 20000 and np.all(stepped.remaining >= 1)
