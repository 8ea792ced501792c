"""Issue 49's fault campaign on the stored ceilings (``core_env/data/suites/``): the K-slot files are verified
against their manifest's sha256, every entry of both ceilings files is range-checked, and what a user or a
corrupted disk can do to them is a ValueError naming the file and the entry (the CLI: exit 2), never a raw
zlib.error / AttributeError / KeyError nor a ceiling above 100 %."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from benchmarks import ceilings
from core_env import ceilings as wl  # the stored ceilings' reader (it was core_env.workload's)

SLOT_FILES = ("ceilings.json", "slot_ceilings.json", "slot_schedules.npz", wl.SLOT_MANIFEST_NAME)


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """Copies of the shipped ceilings files in ``tmp_path``, which every reader and writer then uses."""
    for name in SLOT_FILES:
        shutil.copy(wl.SUITE_DIR / name, tmp_path / name)
    for module in (wl, ceilings):
        monkeypatch.setattr(module, "CEILINGS_PATH", tmp_path / "ceilings.json")
        monkeypatch.setattr(module, "SLOT_CEILINGS_PATH", tmp_path / "slot_ceilings.json")
        monkeypatch.setattr(module, "SLOT_SCHEDULES_PATH", tmp_path / "slot_schedules.npz")
    return tmp_path


def _edit(path, change, stamp=False):
    """Rewrite the JSON at ``path`` through ``change(store)`` (which edits it, or returns a list to replace it);
    with ``stamp`` also list its new sha256 in the manifest (a writer that skips the checks)."""
    store = json.loads(path.read_text())
    replaced = change(store)
    store = replaced if isinstance(replaced, list) else store
    path.write_text(json.dumps(store))
    if stamp:
        manifest = json.loads((path.parent / wl.SLOT_MANIFEST_NAME).read_text())
        manifest[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        (path.parent / wl.SLOT_MANIFEST_NAME).write_text(json.dumps(manifest))


def _episode(store, key="0/0"):
    return store["id__train.npz"]["episodes"][key]


def test_the_shipped_ceilings_files_verify_against_their_manifest():
    manifest = json.loads((wl.SUITE_DIR / wl.SLOT_MANIFEST_NAME).read_text())
    assert set(manifest) == set(SLOT_FILES[:-1])
    for name, sha in manifest.items():
        assert hashlib.sha256((wl.SUITE_DIR / name).read_bytes()).hexdigest() == sha
    assert len(wl.read_slot_ceilings()) == 12 and len(wl.read_slot_schedules()) == 480 and len(wl.read_ceilings()) == 12


@pytest.mark.faults
def test_an_edited_k_slot_ceiling_fails_its_checksum(stored):
    assert wl.suite_slot_ceilings("id", "train")[(0, 0)]["completed"] == 182
    _edit(stored / "slot_ceilings.json", lambda s: _episode(s).update(completed=282))  # 182 -> 282: 120.5 % before
    with pytest.raises(ValueError, match=r"checksum mismatch for .*slot_ceilings\.json: slot_manifest\.json lists sha256"):
        wl.suite_slot_ceilings("id", "train")
    with pytest.raises(ValueError, match=r"checksum mismatch for .*slot_ceilings\.json"):
        ceilings.table()


@pytest.mark.faults
@pytest.mark.parametrize("offset", [100, 1_000_000, -30])
def test_a_flipped_bit_in_the_schedules_is_a_checksum_error_not_a_zlib_error(stored, offset):
    path = stored / "slot_schedules.npz"
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x04
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"checksum mismatch for .*slot_schedules\.npz"):
        wl.read_slot_schedules()


@pytest.mark.faults
def test_a_missing_or_malformed_manifest_is_an_error_naming_it(stored):
    (stored / wl.SLOT_MANIFEST_NAME).write_text("{")
    with pytest.raises(ValueError, match=r"slot_manifest\.json: the K-slot ceilings' manifest is not readable JSON"):
        wl.read_slot_ceilings()
    (stored / wl.SLOT_MANIFEST_NAME).unlink()
    with pytest.raises(ValueError, match=r"slot_ceilings\.json: its sha256 is not listed in .*slot_manifest\.json"):
        wl.suite_slot_ceilings("id", "train")


@pytest.mark.faults
@pytest.mark.parametrize("change, problem", [
    (lambda s: _episode(s).update(completed=282), "entry 'id__train.npz' episode '0/0': completed 282 exceeds arrived 234"),
    (lambda s: _episode(s).update(completed=183), "episode '0/0': completed 183 exceeds the proven bound 182.0"),
    (lambda s: _episode(s).update(bound=300.0), "episode '0/0': bound 300.0 exceeds arrived 234"),
    (lambda s: _episode(s).update(seconds=float("nan")), "episode '0/0': seconds = nan is not a finite number >= 0"),
    (lambda s: _episode(s).update(greedy=-1), "episode '0/0': greedy = -1 is not a finite number >= 0"),
    (lambda s: _episode(s).update(completed="182"), "episode '0/0': completed = '182' is not a number"),
    (lambda s: _episode(s).update(completed=181.5), "completed 181.5 and arrived 234 must be whole numbers"),
    (lambda s: _episode(s).pop("arrived"), "episode '0/0': lacks ['arrived']"),
    (lambda s: s["id__train.npz"]["episodes"].update({"0/0": "182"}), "episode '0/0': not an object (a str)"),
    (lambda s: s["id__train.npz"]["episodes"].update({"0/0": []}), "episode '0/0': not an object (a list)"),
    (lambda s: s.update({"id__train.npz": "x"}), "entry 'id__train.npz' is not an object with a 'sha256' string"),
    (lambda s: s["id__train.npz"].pop("episodes"), "entry 'id__train.npz' is not an object with a 'sha256' string and an 'episodes'"),
    (lambda s: [], "not a JSON object of suite files (a list)"),
])
def test_an_out_of_range_or_malformed_k_slot_entry_is_a_value_error_naming_file_and_entry(stored, change, problem):
    _edit(stored / "slot_ceilings.json", change, stamp=True)  # checksummed by a writer that did not check: the ranges still hold
    for read in (lambda: wl.suite_slot_ceilings("id", "train"), ceilings.table, wl.read_slot_ceilings):
        with pytest.raises(ValueError) as error:
            read()
        assert str(error.value).startswith(f"{stored / 'slot_ceilings.json'}: ") and problem in str(error.value)
    with pytest.raises(ValueError, match="out of range"):  # and the writer refuses to write it
        ceilings.write_slot_files(json.loads((stored / "slot_ceilings.json").read_text()), {})


@pytest.mark.faults
def test_an_edited_slot_relaxed_ceiling_fails_its_checksum(stored):
    _edit(stored / "ceilings.json", lambda s: _episode(s).update(completed=_episode(s)["completed"] + 1))
    for read in (lambda: wl.suite_ceilings("id", "train"), ceilings.table):
        with pytest.raises(ValueError, match=r"checksum mismatch for .*ceilings\.json: slot_manifest\.json lists sha256"):
            read()


@pytest.mark.faults
@pytest.mark.parametrize("change, problem", [
    (lambda s: _episode(s).update(completed=1238), "entry 'id__train.npz' episode '0/0': completed 1238 exceeds arrived 234"),
    (lambda s: _episode(s).pop("bound"), "episode '0/0': lacks ['bound']"),
    (lambda s: [], "not a JSON object of suite files"),
])
def test_the_slot_relaxed_ceilings_are_range_checked_too(stored, change, problem):
    _edit(stored / "ceilings.json", change, stamp=True)
    for read in (lambda: wl.suite_ceilings("id", "train"), ceilings.table):
        with pytest.raises(ValueError) as error:
            read()
        assert str(error.value).startswith(f"{stored / 'ceilings.json'}: ") and problem in str(error.value)


@pytest.mark.faults
def test_the_ceilings_table_never_shows_a_share_above_100_percent():
    text = ceilings.table()
    shares = [float(cell) for line in text.splitlines() if line.startswith("| ") and "/" in line.split("|")[1]
              for cell in line.split("|")[5:8]]
    assert len(shares) == 36 and all(0.0 <= share <= 100.0 for share in shares)


@pytest.mark.faults
def test_writing_keeps_the_manifest_consistent(stored):
    store, schedules = wl.read_slot_ceilings(), wl.read_slot_schedules()
    manifest = json.loads((stored / wl.SLOT_MANIFEST_NAME).read_text())
    (stored / wl.SLOT_MANIFEST_NAME).write_text(json.dumps({**manifest, "other.json": "0" * 64}))
    _episode(store)["seconds"] += 1.0  # what a longer search does (issue 52)
    digests = ceilings.write_slot_files(store, schedules)
    written = json.loads((stored / wl.SLOT_MANIFEST_NAME).read_text())
    assert written == {**manifest, **digests, "other.json": "0" * 64} and digests["slot_schedules.npz"] == manifest["slot_schedules.npz"]
    assert wl.read_slot_ceilings() == store and wl.suite_slot_ceilings("id", "train")[(0, 0)]["seconds"] == _episode(store)["seconds"]
    assert (wl.SUITE_DIR / "slot_ceilings.json").read_bytes() != (stored / "slot_ceilings.json").read_bytes()  # the shipped file untouched


@pytest.mark.faults
def test_the_ceilings_command_exits_2_on_a_damaged_stored_file(stored, capsys):
    _edit(stored / "slot_ceilings.json", lambda s: _episode(s).update(completed=282))
    before = (stored / "slot_ceilings.json").read_bytes()
    with pytest.raises(SystemExit) as stop:
        ceilings.main(["--only", "slots", "--task-sets", "id", "--loads", "train"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and "checksum mismatch for" in line and "slot_ceilings.json" in line
    assert (stored / "slot_ceilings.json").read_bytes() == before  # nothing overwritten


@pytest.mark.faults
@pytest.mark.parametrize("workers", [0, 10**6])
def test_ceilings_workers_beyond_the_cpus_exit_2(workers, capsys):
    with pytest.raises(SystemExit) as stop:
        ceilings.main(["--workers", str(workers)])
    assert stop.value.code == 2
    assert f"--workers must be in [1, {ceilings.max_workers()}] (the CPUs this process may use), got {workers}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"workers must be an int in \[1, "):
        ceilings.solve_slots(["id"], ["train"], workers=workers)


def test_a_gap_closed_figure_is_exact_only_when_the_k_slot_interval_leaves_it_within_half_a_point(stored):
    paper = {"table": {"edf": {"id/train": {"mean": 50.0}}, "good": {"id/train": {"mean": 65.0}}, "milp-slots": {"id/train": {"mean": 80.0}}},
             "gap_closed": {"good": {"id/train": 50.0}, "milp-slots": {"id/train": 100.0}}}
    # ceiling 80 (found) or 82 (proven bound): the row closes 50.0 % or 46.875 % of the gap: 3.125 points apart
    assert ceilings.figure_uncertainty(paper, "id/train", 80.0, 82.0) == {"good": pytest.approx(3.125)}
    assert ceilings.figure_uncertainty(paper, "id/train", 80.0, 80.0) == {"good": 0.0}
    assert ceilings.figure_uncertainty(paper, "rl_ood/train", 80.0, 82.0) == {}  # no EDF there: no figure
    text = ceilings.table(paper)
    line = next(row for row in text.splitlines() if row.startswith("| id/train |"))
    store = list(wl.suite_slot_ceilings("id", "train").values())
    found, bound = (100 * sum(e[key] / e["arrived"] for e in store) / len(store) for key in ("completed", "bound"))
    moved = abs(100 * 15 / (found - 50) - 100 * 15 / (bound - 50))
    assert f"| {int(moved <= ceilings.EXACT_FIGURE)} of 1 |" in line
    assert "exact gap-closed figures" in text and "\"gap closed\" figures of the paper rows are exact" in text
