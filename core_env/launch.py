"""The ``core-benchmarks`` console script: :mod:`benchmarks` from any directory, however the project is installed.

The torchrl wheel installs a bare top-level ``benchmarks/`` folder (no ``__init__.py``) into site-packages.
Under a plain editable install (``pip install -e``, PEP 660), Python's path finder takes that folder for
a namespace package before the editable install's finder is asked, so ``import benchmarks`` would find
torchrl's folder and every suite would fail (``cannot import name 'RESULTS_DIR' from 'benchmarks'``).
This launcher looks up which ``benchmarks`` an import would give and, when it is not the regular package
installed beside :mod:`core_env` (the checkout under an editable install, site-packages otherwise), puts
the directory holding both first on ``sys.path`` before running :func:`benchmarks.__main__.main`.

``python -m benchmarks`` resolves the package before any of our code runs, so in an environment that
also holds the torchrl extra use ``core-benchmarks``, or install with ``--config-settings
editable_mode=compat`` (as ``make setup`` does), or keep torchrl in its own environment.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def ensure_benchmarks() -> None:
    """Make ``import benchmarks`` give the package installed beside :mod:`core_env`."""
    home = Path(__file__).resolve().parent.parent
    ours = home / "benchmarks" / "__init__.py"
    if not ours.exists():
        return
    module = sys.modules.get("benchmarks")
    spec = importlib.util.find_spec("benchmarks") if module is None else module.__spec__
    origin = None if spec is None or spec.origin in (None, "namespace") else Path(spec.origin).resolve()
    if origin != ours:
        sys.path.insert(0, str(home))
        for name in [n for n in sys.modules if n == "benchmarks" or n.startswith("benchmarks.")]:
            del sys.modules[name]
        importlib.invalidate_caches()


def main() -> int:
    ensure_benchmarks()
    from benchmarks.__main__ import main as run

    return run()
