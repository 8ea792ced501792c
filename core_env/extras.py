"""Optional dependencies: which extra of ``core-learning`` installs each, and the one error that says so.

Every import of an optional dependency in :mod:`core_env`, :mod:`mara_agents` and :mod:`benchmarks` sits
inside ``with needs(__name__):`` (or ``with needs(__name__, "sb3"):`` where the feature belongs to a
narrower extra); when the dependency is not installed, the import raises :class:`MissingExtra`, an
ImportError naming the module that needed it and the extra to install::

    mara_agents.mat.model needs torch, which is not installed: pip install 'core-learning[agents]'

``python -m benchmarks`` / ``core-benchmarks`` turn it into exit status 2 with that line, and so does any
other command of these packages (``python -m mara_agents.mat.ppo``, ``python -m core_env.curves ...``):
importing this module installs a ``sys.excepthook`` that, for an uncaught :class:`MissingExtra` while
``__main__`` is one of our modules, prints ``MODULE: MESSAGE`` on one line and exits 2 (every other
exception, and every other program, goes to the hook that was there before). Only a dependency
that is not installed is translated: a broken install (an installed dependency missing a submodule of its
own) keeps its original error. tests/test_extras.py checks :data:`EXTRAS` against pyproject.toml and that every
optional import is guarded.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

PROJECT = "core-learning"

#: Each extra (pyproject.toml ``[project.optional-dependencies]``) and the optional modules (import names) of
#: this package that it installs. A module's default extra is the first listing it (``dev``, the union plus
#: test tools, is never named).
EXTRAS: dict[str, tuple[str, ...]] = {
    "agents": ("torch", "tianshou"),
    "plot": ("matplotlib",),
    "bench": ("torch", "tianshou", "matplotlib", "tqdm", "scipy", "sklearn"),
    "curves": ("torch", "sklearn", "scipy", "mnist1d", "tqdm"),
    "ray": ("ray", "psutil"),
    "tensorboard": ("tensorboard",),
    "ceilings": ("ortools", "highspy"),
    "sb3": ("torch", "sb3_contrib", "stable_baselines3"),
    "torchrl": ("torch", "torchrl", "tensordict"),
    "rllib": ("ray", "torch"),
    "benchmarl": ("benchmarl", "torch", "torchrl", "tensordict"),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def is_optional(module: str | None) -> bool:
    """Whether ``module`` (a top-level import name) is an optional dependency some extra installs."""
    return any(module in modules for modules in EXTRAS.values())


def _known(extra: str | None) -> bool:
    """Whether an extra is named (ValueError for a name that is not one of :data:`EXTRAS`)."""
    if extra is not None and extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; the extras are {', '.join(EXTRAS)}")
    return extra is not None


def extra_for(module: str, preferred: str | None = None) -> str:
    """The extra to install for the optional ``module``: ``preferred`` when that extra installs it, else
    the first extra of :data:`EXTRAS` that does. ValueError for a module no extra installs, or an unknown ``preferred``."""
    if _known(preferred) and module in EXTRAS[preferred]:
        return preferred
    for extra, modules in EXTRAS.items():
        if module in modules:
            return extra
    raise ValueError(f"{module!r} is not an optional dependency of {PROJECT} (core_env.extras.EXTRAS)")


def missing_extra(module: str, user: str, preferred: str | None = None) -> MissingExtra:
    """The error for ``user`` (a module or feature) needing the optional ``module``, which is not installed."""
    extra = extra_for(module, preferred)
    return MissingExtra(f"{user} needs {module}, which is not installed: pip install '{PROJECT}[{extra}]'", name=module)


def _absent(module: str) -> bool:
    """Whether the top-level ``module`` cannot be imported at all (not installed, or ``sys.modules[module] = None``)."""
    if module in sys.modules:
        return sys.modules[module] is None
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


@contextmanager
def needs(user: str, extra: str | None = None) -> Iterator[None]:
    """Guard the imports of optional dependencies: a ModuleNotFoundError for one of them (or a submodule of
    one) that is not installed becomes :func:`missing_extra` naming ``user`` and the extra (``extra`` when
    it installs the module; see :func:`extra_for`). Any other error passes unchanged, a broken install's
    (an installed dependency missing a submodule of its own) included."""
    _known(extra)
    try:
        yield
    except ModuleNotFoundError as error:
        root = (error.name or "").partition(".")[0]
        if not is_optional(root) or not _absent(root):
            raise
        raise missing_extra(root, user, extra) from error


#: The packages whose commands (``python -m PACKAGE.MODULE``) exit 2 on a missing extra.
PACKAGES = ("core_env", "mara_agents", "benchmarks")


def _command() -> str | None:
    """The module ``python -m`` runs, when it is one of :data:`PACKAGES`' (None otherwise)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None) or ""
    return name.removesuffix(".__main__") if name.partition(".")[0] in PACKAGES else None


def _exit_2_on_missing_extra(kind, error, trace, previous=sys.excepthook) -> None:
    command = _command()
    if command is None or not issubclass(kind, MissingExtra):
        previous(kind, error, trace)
        return
    sys.stdout.flush()
    sys.stderr.write(f"python -m {command}: {error}\n")
    sys.stderr.flush()
    os._exit(2)  # an excepthook cannot set the status; nothing ran that needs cleaning up


if getattr(sys.excepthook, "__name__", "") != _exit_2_on_missing_extra.__name__:
    sys.excepthook = _exit_2_on_missing_extra
