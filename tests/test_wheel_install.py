"""The project as users install it (issue 50): the sdist built from the checkout, the wheel built from that
sdist (``pip wheel --no-deps``), installed (not editable) into fresh venvs and run from outside the repository.

* **full**: the wheel beside this environment's packages (the extras a user picks for the benchmarks),
  reused through a ``.pth`` line written after the install (nothing is downloaded; ``.pth`` files inside
  that directory are not processed, so the editable checkout is not on the path): the shipped learned,
  predictor and third-party rows load their checkpoints from the install and play, ``core-benchmarks quick``
  runs, PettingZoo's API test passes.
* **bare**: only numpy, numba, gymnasium, pettingzoo and what they require (linked from this environment, the
  closure pip would install) + the wheel: Gymnasium's ``check_env`` and PettingZoo's API, parallel, seed and
  render tests pass, and what needs an extra says which.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
BARE = ("numpy", "numba", "gymnasium", "pettingzoo")
#: Where the data files a row, predictor or suite reads live (everything under them ships, but the
#: third-party policies' train.json logs, which only the docs read, built from a checkout).
DATA = ("core_env/data/", "mara_agents/checkpoints/", "mara_agents/integrations/checkpoints/", "mara_agents/integrations/benchmarl_conf/")


def _run(command: list[str], cwd: Path, timeout: int = 600, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout, **kwargs)


def _data_files(names: list[str]) -> set[str]:
    return {n for n in names if n.startswith(DATA) and not n.endswith(("/", ".py"))}


def _checkout() -> list[str]:
    """The checkout's files as a build sees them: tracked, and untracked unless ignored."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(sdist, wheel): the sdist of a copy of the checkout (tracked and untracked, unignored files), the wheel from the sdist."""
    root = tmp_path_factory.mktemp("build")
    for name in _checkout():
        (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "src" / name).write_bytes((REPO / name).read_bytes())
    sdist = _run([sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_sdist({str(root / 'dist')!r}))"], root / "src")
    assert sdist.returncode == 0, sdist.stderr[-3000:]
    sdist_path = root / "dist" / sdist.stdout.split()[-1]
    wheel = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", root / "wheels", sdist_path], root)
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    (wheel_path,) = (root / "wheels").glob("core_learning-*.whl")
    print(f"\nwheel {wheel_path.name}: {wheel_path.stat().st_size / 1e6:.2f} MB; sdist {sdist_path.stat().st_size / 1e6:.2f} MB")
    return sdist_path, wheel_path


def _venv(home: Path, wheel: Path) -> tuple[Path, Path]:
    """(python, site-packages) of a fresh venv at ``home`` with the wheel installed, not editable, no dependencies."""
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], home).stdout.strip())
    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel], home)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return python, site


@pytest.fixture(scope="module")
def full(built, tmp_path_factory) -> tuple[Path, Path]:
    python, site = _venv(tmp_path_factory.mktemp("full") / "venv", built[1])
    (site / "_outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # after the install: pip never sees the checkout's dist
    return python, site


def _closure(names: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``names`` need: theirs and their requirements', markers evaluated, no extras."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen[name] = dist = importlib.metadata.distribution(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


@pytest.fixture(scope="module")
def bare(built, tmp_path_factory) -> tuple[Path, Path]:
    python, site = _venv(tmp_path_factory.mktemp("bare") / "venv", built[1])
    for dist in _closure(BARE):
        top = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")} - {"__pycache__"}
        for entry in top:
            (site / entry).symlink_to(Path(dist.locate_file(entry)))
    return python, site


@pytest.mark.faults
def test_the_wheel_and_sdist_carry_the_data_the_rows_read_and_nothing_else(built):
    sdist, wheel = built
    in_wheel = _data_files(zipfile.ZipFile(wheel).namelist())
    assert in_wheel == {n for n in _data_files(_checkout()) if not n.endswith("/train.json")}
    prefix = sdist.name.removesuffix(".tar.gz") + "/"
    with tarfile.open(sdist) as archive:
        assert _data_files([m.name.removeprefix(prefix) for m in archive.getmembers() if m.isfile()]) == in_wheel
    others = [n for n in zipfile.ZipFile(wheel).namelist() if n not in in_wheel and not n.endswith(".py") and ".dist-info/" not in n]
    assert not others, f"the wheel carries files no row reads: {others}"


ROWS = """
import json, sys
import benchmarks, core_env, mara_agents
from benchmarks.agents import LEARNED, LIBRARY_ROWS, available, make_agent, trained_on, weights_id
from benchmarks.budget import SNAPSHOTS, snapshots
from benchmarks.rollout import run_agent
from core_env.config import EnvConfig
from core_env.workload import load_suite, suite_slot_ceiling_rates
from mara_agents.predictors import PREDICTORS

played = {}
for row in ("lara-fm", "edf-admission:pfn,min_reports=1", "mara", "ppo-tianshou"):
    stats = run_agent(make_agent(row), [load_suite("id", "train", 0, 0)], EnvConfig(max_cycles=60))
    played[row] = [float(stats["completion_rate"][0]), bool(stats["truncated"][0])]
print(json.dumps({
    "files": [m.__file__ for m in (core_env, mara_agents, benchmarks)],
    "available": {row: available(row) for row in (*LEARNED, *LIBRARY_ROWS)},
    "weights": {row: weights_id(row) for row in (*LEARNED, *LIBRARY_ROWS, "lara-fm", "lara:pfn")},
    "trained_on": trained_on("mara"), "budget": len(snapshots(SNAPSHOTS)),
    "ceilings": suite_slot_ceiling_rates("id", "train", [(0, 0)]).tolist(), "played": played,
    "ensemble": len(PREDICTORS["pfn-ens"]().components)}))
"""


def _printed(python, code: str, cwd):
    """The JSON the script ``code`` prints last, run by ``python`` in ``cwd`` (which must succeed)."""
    run = _run([python, "-c", code], cwd)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.faults
def test_the_installed_wheel_plays_the_learned_predictor_and_library_rows_from_outside_the_repository(full, tmp_path):
    python, site = full
    found = _printed(python, ROWS, tmp_path)
    assert all(Path(f).is_relative_to(site) for f in found["files"]), found["files"]  # the wheel, not the checkout
    assert all(found["available"].values()), found["available"]
    assert all(found["weights"].values()), found["weights"]  # every manifest read
    assert found["trained_on"] == "discrete_core_v1" and found["budget"] == len(list((REPO / "mara_agents" / "checkpoints" / "budget").glob("*.pt"))) == 14 and 0 < found["ceilings"][0] <= 1
    assert found["ensemble"] == 5  # the shipped PFN and the four members under checkpoints/pfn_ensemble/, each verified
    for row, (completion, truncated) in found["played"].items():
        assert truncated and 0 <= completion <= 1, (row, completion)


@pytest.mark.faults
def test_core_benchmarks_quick_and_the_pettingzoo_api_test_run_from_the_installed_wheel(full, tmp_path):
    python, _ = full
    out = tmp_path / "out"
    quick = _run([python.parent / "core-benchmarks", "quick", "--rows", "edf", "ppo-tianshou", "--roots", "1", "--episodes", "1", "--out", out], tmp_path)
    assert quick.returncode == 0, quick.stderr[-3000:]
    summary = json.loads((out / "quick.json").read_text())["summary"]
    assert {"edf", "ppo-tianshou"} <= set(summary) and summary["ppo-tianshou"]["id/train"]["mean"] > 0
    api = _run([python, "-c", "from pettingzoo.test import api_test; from core_env import discrete_core_v1; api_test(discrete_core_v1.env(), num_cycles=100)"], tmp_path)
    assert api.returncode == 0, api.stderr[-3000:]


BARE_CHECKS = textwrap.dedent("""
    import contextlib, importlib, io, json, warnings
    missing = []
    for name in ("matplotlib", "torch", "tqdm", "scipy", "tianshou"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            missing.append(name)
    import gymnasium as gym
    import core_env
    from core_env import discrete_core_v1
    from gymnasium.utils.env_checker import check_env
    from pettingzoo.test import api_test, parallel_api_test, render_test, seed_test
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gym.make("core_env/DiscreteCoRE-v1").unwrapped)
    with contextlib.redirect_stdout(io.StringIO()):
        api_test(discrete_core_v1.env(), num_cycles=100)
        parallel_api_test(discrete_core_v1.parallel_env(), num_cycles=100)
        seed_test(discrete_core_v1.env, num_cycles=20)
        render_test(discrete_core_v1.env)
    import numpy as np
    env, rng = gym.make("core_env/DiscreteCoRE-v1", render_mode="rgb_array"), np.random.default_rng(0)
    observation, _ = env.reset(seed=0)
    for _ in range(20):
        observation = env.step(np.array([rng.choice(np.flatnonzero(mask)) for mask in observation["action_mask"]]))[0]
    image = env.render()
    print(json.dumps({"missing": missing, "file": core_env.__file__, "warnings": [str(w.message) for w in caught],
                      "image": [list(image.shape), str(image.dtype), int((image != 255).any(axis=2).sum())]}))
""")


@pytest.mark.faults
def test_a_bare_install_passes_gymnasiums_checker_and_pettingzoos_tests(bare, tmp_path):
    python, site = bare
    found = _printed(python, BARE_CHECKS, tmp_path)
    assert found["missing"] == ["matplotlib", "torch", "tqdm", "scipy", "tianshou"]  # really bare
    assert Path(found["file"]).is_relative_to(site)
    assert found["warnings"] == []  # check_env: not even a warning
    shape, dtype, drawn = found["image"]
    assert shape[2] == 3 and dtype == "uint8" and drawn > 1000  # the Gantt chart and losses, drawn with numpy


@pytest.mark.faults
def test_a_bare_install_names_the_extra_a_module_or_suite_needs(bare, tmp_path):
    python, _ = bare
    for module, extra in (("mara_agents.mat.model", "agents"), ("mara_agents.integrations.tianshou_ppo", "agents"), ("benchmarks.stats", None)):
        run = _run([python, "-c", f"import {module}"], tmp_path)
        if extra is None:  # numpy only at import; scipy is needed when a test runs
            assert run.returncode == 0, run.stderr[-2000:]
            continue
        assert run.returncode == 1 and run.stderr.strip().splitlines()[-1].endswith(f"pip install 'core-learning[{extra}]'"), run.stderr[-2000:]
    quick = _run([python.parent / "core-benchmarks", "quick", "--rows", "edf", "--roots", "1", "--out", tmp_path / "out"], tmp_path)
    assert quick.returncode == 2 and "Traceback" not in quick.stderr, quick.stderr[-2000:]
    assert re.fullmatch(r"python -m benchmarks quick: benchmarks\.\w+ needs tqdm, which is not installed: pip install 'core-learning\[bench\]'",
                        quick.stderr.strip()), quick.stderr
