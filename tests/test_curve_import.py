"""Importing user curves into bank files (core_env.curves.importer) and the public flag rule.

Every source file is small and written by the test itself; the whole module runs in a few seconds.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from core_env.curves import CurveBank
from core_env.curves.__main__ import main as cli
from core_env.curves.bank import LOSS_CEIL, LOSS_FLOOR
from core_env.curves.flags import DIVERGED, EXPLODE_FACTOR, NON_LEARNER, flag_runs
from core_env.curves.importer import CurveImportError, _manifest_sha256, import_curves, load_bank, read_bank_manifest, write_bank
from core_env.npz import write_npz


def _curve(n: int, seed: int, start: float = 3.0, learn: bool = True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.arange(n, dtype=np.float64)
    base = start * (1 + x / 10.0) ** -0.5 if learn else np.full(n, start)
    return base * (1 + 0.02 * rng.standard_normal(n))


def _write_csv(path: Path, rows, header=("run_id", "step", "loss", "family")) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        if header:
            writer.writerow(header)
        writer.writerows(rows)
    return path


def _runs(families=(("a", 5), ("b", 4)), n=30, stride=1):
    """{run_id: (family, steps, losses)}: learners, plus one non-learner in family b."""
    out = {}
    for fam, count in families:
        for r in range(count):
            losses = _curve(n, hash((fam, r)) % 1000, learn=not (fam == "b" and r == 0))
            out[f"{fam}{r}"] = (fam, np.arange(n) * stride, losses)
    return out


def _rows(runs, shuffle_seed=None):
    rows = [(rid, int(s), repr(float(v)), fam) for rid, (fam, steps, losses) in runs.items() for s, v in zip(steps, losses)]
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(rows))
        rows = [rows[i] for i in order]
    return rows


def _kinds(imported) -> list[str]:
    return [t["kind"] for t in imported.manifest["transformations"]]


# ----------------------------------------------------------------------------------- the flag rule
def test_public_flag_rule_reproduces_the_committed_corpus_flags():
    from core_env.curves.corpus import read_family, read_manifest

    total = 0
    for family in read_manifest()["families"]:
        arrays = read_family(family)
        values, offsets = arrays["values"].astype(np.float64), arrays["offsets"]
        curves = [values[offsets[i] : offsets[i + 1]] for i in range(arrays["flags"].size)]
        recomputed = flag_runs(curves)
        mismatch = np.flatnonzero(recomputed != arrays["flags"])
        assert mismatch.size == 0, f"{family}: runs {arrays['run_index'][mismatch].tolist()} flag differently"
        total += len(curves)
    assert total > 1000


def test_flag_rule_cases():
    learner = np.linspace(3.0, 1.0, 100)
    flat = np.full(100, 2.0)
    flags = flag_runs([learner, flat, np.append(learner, np.nan), np.array([2.0, 50.0, EXPLODE_FACTOR * 2.0]),
                       np.array([0.5, 99.0, 1.0]), np.array([0.5, 100.0, 0.1]), np.array([np.nan, 1.0]), np.zeros(0)])
    assert flags.tolist() == [0, NON_LEARNER, DIVERGED, DIVERGED | NON_LEARNER, NON_LEARNER, DIVERGED | NON_LEARNER,
                              DIVERGED | NON_LEARNER, NON_LEARNER]
    assert flag_runs([learner], stopped=[True]).tolist() == [DIVERGED]
    # the boundary: final/initial smoothed ratio 0.9 is not a non-learner, just above it is
    w = 5
    assert flag_runs([np.r_[np.full(w, 1.0), np.full(w, 0.9)]]).tolist() == [0]
    assert flag_runs([np.r_[np.full(w, 1.0), np.full(w, 0.9001)]]).tolist() == [NON_LEARNER]
    # finite losses so large that their sum overflows: a constant run is still a non-learner, a learning one is not
    assert flag_runs([np.full(100, 1e308), np.linspace(1.7e308, 1e307, 100)]).tolist() == [NON_LEARNER, 0]


def test_generator_finalize_uses_the_public_rule():
    from core_env.curves.runs.common import finalize

    for losses, diverged in (([2.3, 2.0, 1.5, 1.0, 0.5, 0.4, float("nan")], True), ([2.3] * 20, False), (list(np.linspace(3, 1, 50)), False)):
        values, flags, _ = finalize(losses, diverged)
        assert flags == int(flag_runs([values], stopped=[diverged])[0])


# ------------------------------------------------------------------------------------ round trips
def test_csv_round_trip_unsorted_rows(tmp_path):
    runs = _runs()
    src = _write_csv(tmp_path / "runs.csv", _rows(runs, shuffle_seed=1))
    imported = import_curves(src)
    assert _kinds(imported) == ["sort_steps"]
    digest = write_bank(tmp_path / "bank.npz", imported)
    manifest = read_bank_manifest(tmp_path / "bank.npz")
    assert manifest["format"] == "core_env.curves.bank" and manifest["format_version"] == 2
    assert manifest["source"]["format"] == "csv" and len(manifest["source"]["sha256"]) == 64
    assert manifest["steps"] == {"unit": 1, "unit_source": "auto (greatest common divisor of the logged step differences)", "resampled": False}
    full = load_bank(tmp_path / "bank.npz", split="all")
    assert isinstance(full, CurveBank) and len(full) == len(runs)
    for i, entry in enumerate(manifest["runs"]):
        fam, _, losses = runs[entry["run_id"]]
        np.testing.assert_array_equal(full.curve(i), losses)
        assert full.family[i] == fam == entry["family"]
    assert {e["run_id"]: e["flags"] for e in manifest["runs"]}["b0"] == NON_LEARNER
    assert int(full.flags.sum()) == NON_LEARNER
    train, eval_ = load_bank(tmp_path / "bank.npz", "train"), load_bank(tmp_path / "bank.npz", "eval")
    assert len(train) + len(eval_) == len(runs) and len(train) == manifest["counts"]["train"]
    # same source, same options -> byte-identical bank file
    assert write_bank(tmp_path / "again.npz", import_curves(src)) == digest


def test_npz_padded_2d_round_trip(tmp_path):
    lengths = [30, 25, 18]
    padded = np.full((3, 30), np.nan)
    curves = [_curve(n, i) for i, n in enumerate(lengths)]
    for i, c in enumerate(curves):
        padded[i, : c.size] = c
    np.savez(tmp_path / "runs.npz", losses=padded, family=np.array(["x", "x", "y"]), run_id=np.array(["r1", "r2", "r3"]))
    imported = import_curves(tmp_path / "runs.npz")
    assert _kinds(imported) == ["remove_padding"]
    assert imported.manifest["transformations"][0]["values"] == 5 + 12
    write_bank(tmp_path / "bank.npz", imported)
    bank = load_bank(tmp_path / "bank.npz", split="all")
    for i, c in enumerate(curves):
        np.testing.assert_array_equal(bank.curve(i), c)
    assert bank.family.tolist() == ["x", "x", "y"]


def test_npz_ragged_needs_allow_pickle_and_round_trips(tmp_path):
    curves = [_curve(12, 0), _curve(20, 1), _curve(7, 2)]
    ragged = np.empty(3, dtype=object)
    ragged[:] = curves
    np.savez(tmp_path / "ragged.npz", losses=ragged)
    with pytest.raises(CurveImportError, match=r"ragged\.npz: array 'losses' is an object \(ragged\) array.*--allow-pickle"):
        import_curves(tmp_path / "ragged.npz")
    imported = import_curves(tmp_path / "ragged.npz", allow_pickle=True)
    assert imported.run_ids == ("row0", "row1", "row2") and set(imported.family) == {"imported"}
    for got, want in zip(imported.curves, curves):
        np.testing.assert_array_equal(got, want)


def test_npz_one_array_per_run_with_family_keys(tmp_path):
    arrays = {"cnn/seed0": _curve(15, 0), "cnn/seed1": _curve(16, 1), "mlp/seed0": _curve(14, 2)}
    np.savez(tmp_path / "many.npz", **arrays)
    imported = import_curves(tmp_path / "many.npz")
    assert imported.run_ids == tuple(sorted(arrays)) and imported.family == ("cnn", "cnn", "mlp")
    assert imported.manifest["family_source"] == "key prefix 'family/run'"
    for rid, curve in zip(imported.run_ids, imported.curves):
        np.testing.assert_array_equal(curve, arrays[rid])


def _tensorboard_writer():
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as exc:  # pragma: no cover - tensorboard is in the dev environment
        print(f"skipping: no TensorBoard writer/reader installed ({exc})")
        pytest.skip(f"tensorboard is not installed ({exc}); pip install tensorboard")

    def write(directory: Path, tag_values: dict[str, list[tuple[int, float]]]) -> None:
        writer = EventFileWriter(str(directory))
        for tag, points in tag_values.items():
            for step, value in points:
                writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)])))
        writer.close()

    return write


def test_tensorboard_round_trip(tmp_path):
    write = _tensorboard_writer()
    logs = tmp_path / "logs"
    expected = {}
    for fam in ("resnet", "vit"):
        for r in range(3):
            curve = _curve(20, r + (10 if fam == "vit" else 0)).astype(np.float32).astype(np.float64)
            points = [(10 * s, float(v)) for s, v in enumerate(curve)][::-1]  # written in reverse step order
            write(logs / fam / f"run{r}", {"train/loss": points, "lr": [(10 * s, 0.1) for s in range(20)]})
            expected[f"{fam}/run{r}"] = (fam, curve)
    with pytest.raises(CurveImportError, match=r"pass tag= / --tag.*\['lr', 'train/loss'\]"):
        import_curves(logs)
    imported = import_curves(logs, tag="train/loss")
    assert imported.manifest["source"]["format"] == "tensorboard" and len(imported.manifest["source"]["files"]) == 6
    assert imported.manifest["steps"]["unit"] == 10 and _kinds(imported) == ["sort_steps"]
    write_bank(tmp_path / "bank.npz", imported)
    bank = load_bank(tmp_path / "bank.npz", "all")
    for i, rid in enumerate(imported.run_ids):
        fam, curve = expected[rid]
        assert bank.family[i] == fam
        np.testing.assert_allclose(bank.curve(i), curve, rtol=0, atol=0)


@pytest.mark.parametrize(("damage", "message"), [("flip", "fails its (length|data) checksum"), ("cut", "ends inside"), ("flip-late", "fails its data checksum")])
def test_a_damaged_tensorboard_event_file_is_refused_not_read_in_part(tmp_path, damage, message):
    # TensorBoard's own reader stops (or skips) silently at a bad record: the import checks every record's framing
    write = _tensorboard_writer()
    for r in range(2):
        write(tmp_path / "logs" / "fam" / f"run{r}", {"loss": [(s, 3.0 / (1 + s)) for s in range(40)]})
    event = sorted((tmp_path / "logs" / "fam" / "run1").glob("*tfevents*"))[0]
    data = bytearray(event.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x10
    elif damage == "flip-late":
        data[-6] ^= 0x01  # inside the last record's data
    else:
        data = data[: len(data) - 7]
    event.write_bytes(bytes(data))
    with pytest.raises(CurveImportError, match=f"{event.name}.*({message})"):
        import_curves(tmp_path / "logs")


def test_tensorboard_missing_package_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "events.out.tfevents.0.host").write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing", None)
    with pytest.raises(ImportError, match=r"core-learning\[tensorboard\]"):
        import_curves(tmp_path)


# ----------------------------------------------------------------------------------------- splits
def test_split_is_seeded_stratified_and_covers_every_family(tmp_path):
    runs = _runs(families=(("a", 10), ("b", 2), ("c", 3), ("solo", 1)))
    src = _write_csv(tmp_path / "runs.csv", _rows(runs))
    first = import_curves(src, eval_share=0.3, seed=7)
    again = import_curves(_write_csv(tmp_path / "shuffled.csv", _rows(runs, shuffle_seed=3)), eval_share=0.3, seed=7)
    assert np.array_equal(first.split, again.split) and first.run_ids == again.run_ids  # independent of row order
    other = import_curves(src, eval_share=0.3, seed=8)
    assert not np.array_equal(first.split, other.split)
    fams = np.array(first.family)
    expected_eval = {"a": 3, "b": 1, "c": 1, "solo": 0}
    for fam, n_eval in expected_eval.items():
        assert int(first.split[fams == fam].sum()) == n_eval, fam
        assert first.manifest["families"][fam]["eval"] == n_eval
    m = first.manifest["split"]
    assert set(m["train"]).isdisjoint(m["eval"]) and sorted(m["train"] + m["eval"]) == sorted(runs)
    assert any("'solo' has 1 run" in note for note in first.manifest["notes"])
    eval_bank = first.bank("eval")
    assert set(eval_bank.family.tolist()) == {"a", "b", "c"}
    assert set(first.bank("train").family.tolist()) == {"a", "b", "c", "solo"}
    with pytest.raises(ValueError, match="eval_share"):
        import_curves(src, eval_share=1.0)


# ------------------------------------------------------------------------------ transformations
def test_clipping_is_recorded_and_printed(tmp_path, capsys):
    rows = [("r", s, v, "f") for s, v in enumerate([5e6, 2.0, 1.0, 0.5, -0.2, 0.0, 1e-9])]
    rows += [("q", s, v, "f") for s, v in enumerate(np.linspace(3, 1, 10))]
    src = _write_csv(tmp_path / "clip.csv", rows)
    assert cli(["import", str(src), "--out", str(tmp_path / "bank.npz")]) == 0
    out = capsys.readouterr().out
    assert "clipped 4 losses into [1e-06, 1e+06]: 3 below, 1 above, in 1 run: 'r'" in out
    manifest = read_bank_manifest(tmp_path / "bank.npz")
    clip = next(t for t in manifest["transformations"] if t["kind"] == "clip")
    assert clip["below"] == 3 and clip["above"] == 1 and clip["runs"]["r"]["min"] == -0.2
    bank = load_bank(tmp_path / "bank.npz", "all")
    r = bank.curve([e["run_id"] for e in manifest["runs"]].index("r"))
    assert r.max() == LOSS_CEIL and r.min() == LOSS_FLOOR
    # flags are judged on the raw losses: no loss reaches 100 x the first (5e6), and the loss came down
    assert {e["run_id"]: e["flags"] for e in manifest["runs"]}["r"] == 0


def test_resampling_onto_one_step_grid_is_recorded(tmp_path, capsys):
    rows = [("even", s, 3.0 / (1 + s), "f") for s in range(0, 100, 10)]
    rows += [("gappy", s, 3.0 / (1 + s), "f") for s in (0, 10, 20, 50, 60, 90)]
    src = _write_csv(tmp_path / "steps.csv", rows)
    imported = import_curves(src)
    resample = next(t for t in imported.manifest["transformations"] if t["kind"] == "resample")
    assert resample["step_unit"] == 10 and list(resample["runs"]) == ["gappy"]
    assert resample["runs"]["gappy"] == {"logged": 6, "points": 10, "interpolated": 4, "off_grid_dropped": 0}
    gappy = imported.curves[imported.run_ids.index("gappy")]
    assert gappy.size == 10 and gappy[3] == pytest.approx(3.0 / 21 + (3.0 / 51 - 3.0 / 21) / 3)
    coarse = import_curves(src, step_unit=30)
    assert coarse.manifest["steps"]["unit_source"] == "option"
    assert [c.size for c in coarse.curves] == [4, 4]
    assert cli(["import", str(src), "--out", str(tmp_path / "b.npz")]) == 0
    assert "resampled 1 run onto a grid of 10 step(s) per point (linear interpolation): 4 points interpolated" in capsys.readouterr().out


def test_non_finite_losses_truncate_and_flag_the_run(tmp_path):
    rows = [("ok", s, v, "f") for s, v in enumerate(np.linspace(3, 1, 20))]
    rows += [("boom", s, v, "f") for s, v in enumerate([3.0, 2.5, 2.0, float("nan"), 1.0, float("inf")])]
    imported = import_curves(_write_csv(tmp_path / "nan.csv", rows))
    trunc = next(t for t in imported.manifest["transformations"] if t["kind"] == "truncate_non_finite")
    assert trunc["runs"]["boom"] == {"step": 3, "value": "nan", "points_dropped": 3, "finite_points_dropped": 1}
    i = imported.run_ids.index("boom")
    np.testing.assert_array_equal(imported.curves[i], [3.0, 2.5, 2.0])
    assert imported.flags[i] & DIVERGED and not imported.flags[imported.run_ids.index("ok")]


# -------------------------------------------------------------------------------------- bad files
@pytest.mark.parametrize(
    "name, content, pattern",
    [
        ("empty.csv", "", r"empty\.csv: the file is empty"),
        ("header.csv", "run_id,step,loss\n", r"header\.csv: the file has a header but no data rows"),
        ("cols.csv", "run,step,loss\na,0,1\n", r"cols\.csv: missing column\(s\) \['run_id'\] in the header \(line 1\)"),
        ("text.csv", "run_id,step,loss\na,0,1.0\na,1,oops\n", r"text\.csv: row 2 \(line 3\), column 'loss': loss 'oops' is not a number"),
        ("step.csv", "run_id,step,loss\na,0,1.0\na,x,0.5\n", r"step\.csv: row 2 \(line 3\), column 'step': step 'x' is not a number"),
        ("dup.csv", "run_id,step,loss\na,0,1.0\na,1,0.9\nb,0,1\nb,1,1\na,1,0.8\n",
         r"dup\.csv: line 6: duplicate step 1 for run 'a' \(first on line 3\)"),
        ("nan.csv", "run_id,step,loss\na,0,1.0\na,1,0.5\nb,0,nan\nb,1,nan\n", r"nan\.csv: run 'b' \(lines 4-5\) is NaN-only"),
        ("one.csv", "run_id,step,loss\na,0,1.0\na,1,0.5\nb,3,1.0\n", r"one\.csv: run 'b' \(lines 4-4\) has only 1 point"),
        ("fields.csv", "run_id,step,loss\na,0\n", r"fields\.csv: row 1 \(line 2\): 2 fields, the header has 3"),
        ("frac.csv", "run_id,step,loss\na,0.5,1.0\n", r"frac\.csv: row 1 \(line 2\), column 'step': step '0.5' is not an integer step"),
        ("big.csv", "run_id,step,loss\na,0," + "1" * 200_000 + "\n", r"big\.csv: line 2: field larger than field limit"),
        ("huge.csv", "run_id,step,loss\na,0,1.0\na,9223372036854775808,0.5\n", r"huge\.csv: row 2 \(line 3\), column 'step': step '9223372036854775808' is outside \[0, 2\*\*62\]"),
        ("negative.csv", "run_id,step,loss\na,-1,1.0\n", r"negative\.csv: row 1 \(line 2\), column 'step': step '-1' is outside"),
        ("under.csv", "run_id,step,loss\na,0,1_000\na,1,0.5\n", r"under\.csv: row 1 \(line 2\), column 'loss': loss '1_000' is not a number"),
        ("fam.csv", "run_id,step,loss,family\na,0,1.0,x\na,1,0.5,y\n",
         r"fam\.csv: row 2 \(line 3\): run 'a' has family 'y' here but 'x' on line 2"),
    ],
)
def test_bad_csv_files_name_the_file_and_row_or_run(tmp_path, name, content, pattern):
    (tmp_path / name).write_text(content)
    with pytest.raises(CurveImportError, match=pattern):
        import_curves(tmp_path / name)


def test_bad_npz_files(tmp_path):
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(CurveImportError, match=r"empty\.npz: the file is empty"):
        import_curves(tmp_path / "empty.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(CurveImportError, match=r"junk\.npz: not a NumPy \.npz archive"):
        import_curves(tmp_path / "junk.npz")
    import io
    import zipfile

    member = io.BytesIO()  # a header declaring (2, 400,000,000) float32 (3.2 GB) in a 40-byte member: refused unallocated
    np.lib.format.write_array(member, np.zeros((2, 4), np.float32))
    with zipfile.ZipFile(tmp_path / "lying.npz", "w") as archive:
        archive.writestr("losses.npy", member.getvalue().replace(b"(2, 4)", b"(2, 400000000)"))
    with pytest.raises(CurveImportError, match=r"lying\.npz: member 'losses\.npy' .*declares \(2, 400000000\) float32 .*the member holds 40"):
        import_curves(tmp_path / "lying.npz")
    np.savez(tmp_path / "good.npz", losses=np.array([[1.0, 0.5, 0.4]]))
    flipped = bytearray((tmp_path / "good.npz").read_bytes())
    flipped[len(flipped) // 3] ^= 0x40  # inside the member's data: its CRC fails
    (tmp_path / "flipped.npz").write_bytes(bytes(flipped))
    with pytest.raises(CurveImportError, match=r"flipped\.npz"):
        import_curves(tmp_path / "flipped.npz")
    np.savez(tmp_path / "nan_row.npz", losses=np.array([[1.0, 0.5, 0.4], [np.nan, np.nan, np.nan]]))
    with pytest.raises(CurveImportError, match=r"nan_row\.npz: array 'losses', row 1 \(run 'row1'\) is NaN-only"):
        import_curves(tmp_path / "nan_row.npz")
    np.savez(tmp_path / "strings.npz", a=np.array(["x", "y"]))
    with pytest.raises(CurveImportError, match=r"strings\.npz: array 'a' has dtype <U1, not numbers"):
        import_curves(tmp_path / "strings.npz")
    np.savez(tmp_path / "steps.npz", losses=np.ones((2, 3)), steps=np.arange(3)[None, :])
    with pytest.raises(CurveImportError, match=r"steps\.npz: array 'steps' has 1 rows, 'losses' has 2"):
        import_curves(tmp_path / "steps.npz")
    np.savez(tmp_path / "fam.npz", losses=np.ones((2, 3)), family=np.array(["x"]))
    with pytest.raises(CurveImportError, match=r"fam\.npz: array 'family' must be 1-D strings with one entry per run \(2\)"):
        import_curves(tmp_path / "fam.npz")
    np.savez(tmp_path / "short.npz", a=np.array([1.0, 0.5]), b=np.array([2.0]))
    with pytest.raises(CurveImportError, match=r"short\.npz: array 'b' has only 1 point"):
        import_curves(tmp_path / "short.npz")


def test_drop_bad_runs_records_every_drop(tmp_path, capsys):
    src = tmp_path / "mixed.csv"
    src.write_text("run_id,step,loss\na,0,1.0\na,1,0.5\nb,0,nan\nb,1,nan\nc,0,2.0\n")
    assert cli(["import", str(src), "--out", str(tmp_path / "bank.npz"), "--drop-bad-runs"]) == 0
    out = capsys.readouterr().out
    assert "dropped 2 runs with fewer than 2 finite points: 'b (is NaN-only)', 'c (has only 1 point)'" in out
    manifest = read_bank_manifest(tmp_path / "bank.npz")
    assert [r["run_id"] for r in manifest["runs"]] == ["a"]
    assert next(t for t in manifest["transformations"] if t["kind"] == "drop_run")["runs"] == {"b": "is NaN-only", "c": "has only 1 point"}


def test_cli_errors_exit_2_with_the_message(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("run_id,step,loss\na,0,zz\n")
    assert cli(["import", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "x.npz")]) == 2
    assert "bad.csv: row 1 (line 2), column 'loss': loss 'zz' is not a number" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()


# ------------------------------------------------------------------------------------ loading back
def test_load_bank_verifies_checksums(tmp_path, capsys):
    src = _write_csv(tmp_path / "runs.csv", _rows(_runs()))
    path = tmp_path / "bank.npz"
    write_bank(path, import_curves(src))
    assert cli(["info", str(path)]) == 0 and "checksums OK" in capsys.readouterr().out
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    arrays["values"] = arrays["values"].copy()
    arrays["values"][3] *= 1.5
    write_npz(path, arrays)
    with pytest.raises(ValueError, match=r"bank\.npz: checksum mismatch for array 'values'"):
        load_bank(path)
    assert cli(["info", str(path)]) == 2 and "checksum mismatch for array 'values'" in capsys.readouterr().err
    manifest = json.loads(arrays.pop("manifest").tobytes())
    manifest["format_version"] = 99
    arrays["manifest"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    write_npz(path, arrays)
    with pytest.raises(ValueError, match="bank format version 99; this core_env reads version 2"):
        load_bank(path)
    for edit, message in ((lambda m: m.update(name="id"), "checksum mismatch for the manifest"),  # renamed by hand
                          (lambda m: m["runs"].pop(), "checksum mismatch for the manifest")):
        manifest = json.loads(json.dumps(_manifest_of(tmp_path, src)))
        edit(manifest)
        write_npz(path, {**_arrays_of(tmp_path, src), "manifest": np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)})
        with pytest.raises(ValueError, match=message):
            load_bank(path)
    # values out of range or unknown flags behind checksums recomputed to match them
    for key, change, message in (("values", lambda a: a.__setitem__(0, -1.0), r"losses must be floats in \[1e-06, 1e\+06\]"),
                                 ("flags", lambda a: a.__setitem__(0, 255), "run flags may only combine")):
        arrays = _arrays_of(tmp_path, src)
        arrays[key] = arrays[key].copy()
        change(arrays[key])
        manifest = _manifest_of(tmp_path, src)
        manifest["arrays"][key]["sha256"] = hashlib.sha256(np.ascontiguousarray(arrays[key]).tobytes()).hexdigest()
        manifest["manifest_sha256"] = _manifest_sha256(manifest)
        write_npz(path, {**arrays, "manifest": np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)})
        with pytest.raises(ValueError, match=message):
            load_bank(path)
    np.savez(tmp_path / "plain.npz", values=np.ones(3))
    with pytest.raises(ValueError, match=r"plain\.npz: not a bank file \(no 'manifest' member\)"):
        load_bank(tmp_path / "plain.npz")
    with pytest.raises(ValueError, match="unknown split"):
        load_bank(tmp_path / "plain.npz", split="test")


def _written(tmp_path, src):
    path = tmp_path / "fresh.npz"
    write_bank(path, import_curves(src))
    with np.load(path) as archive:
        return {k: archive[k] for k in archive.files}


def _arrays_of(tmp_path, src):
    arrays = _written(tmp_path, src)
    arrays.pop("manifest")
    return arrays


def _manifest_of(tmp_path, src):
    return json.loads(_written(tmp_path, src)["manifest"].tobytes())


def test_a_bank_may_not_take_a_built_in_task_set_name(tmp_path):
    src = tmp_path / "id.csv"
    src.write_text("run_id,step,loss\na,0,1.0\na,1,0.5\na,2,0.4\nb,0,1.0\nb,1,0.6\nb,2,0.5\n")
    with pytest.raises(CurveImportError, match=r"id\.csv: the bank would be named 'id', a built-in task set's name; pass name="):
        import_curves(src)
    assert import_curves(src, name="my_id").manifest["name"] == "my_id"
