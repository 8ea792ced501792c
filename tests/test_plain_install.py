"""A plain ``pip install -e`` (PEP 660, not the Makefile's compat mode) beside a bare top-level
``benchmarks/`` folder in site-packages (what the torchrl wheel installs): ``core-benchmarks`` still runs
our suites from a directory outside the repository and writes only under ``--out``.

The scratch venv reuses this environment's packages through a ``.pth`` line (nothing is downloaded) and
installs the project itself without dependencies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("plain-venv")
    venv.EnvBuilder(with_pip=False).create(home)
    python = home / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # this env's packages, not its .pth files
    (site / "benchmarks").mkdir()
    (site / "benchmarks" / "ASYNC_BENCHMARKS.md").write_text("a bare folder, as the torchrl wheel ships\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                                "--no-build-isolation", "-e", str(REPO)], capture_output=True, text=True, timeout=300)
    if installed.returncode:
        pytest.skip(f"cannot make a plain editable install here: {installed.stderr.strip()[-500:]}")
    return home


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_python_finds_the_bare_folder_first_under_a_plain_editable_install(plain, tmp_path):
    # the trap the launcher exists for: `import benchmarks` from outside the checkout is torchrl's folder
    found = subprocess.run([str(plain / "bin" / "python"), "-c", "import benchmarks; print(benchmarks.__file__, list(benchmarks.__path__))"],
                           cwd=tmp_path, capture_output=True, text=True, env=_env())
    assert found.returncode == 0 and found.stdout.startswith("None"), found.stdout + found.stderr


def test_core_benchmarks_runs_prediction_and_perf_from_outside_the_repository(plain, tmp_path):
    script = plain / "bin" / "core-benchmarks"
    # perf's quick mode: the launcher and --out are what is tested here; the full perf run's parts (a cold numba
    # compile alone takes half a minute) are tested in-process by tests/test_perf.py and tests/test_benchmarks.py
    for suite, args, written in (("prediction", ["--quick", "--task-sets", "id"], "prediction"), ("perf", ["--ratios", "--seconds", "0.05"], "perf_ratios")):
        out = tmp_path / suite
        run = subprocess.run([str(script), suite, *args, "--out", str(out)], cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        payload = json.loads((out / f"{written}.json").read_text())
        assert payload["suite"] == suite  # the suite's own output, under --out
    assert not (tmp_path / "results").exists()  # nothing written to the default ./results when --out is given
