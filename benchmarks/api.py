"""Put your own agent through a benchmark suite from Python: :func:`evaluate`.

Example::

    from benchmarks import evaluate
    from mara_agents.heuristics import EDF

    class MyAgent(EDF):
        ...

    payload = evaluate(MyAgent, suite="paper", out="my-results", scenarios=["id/train"])
    print(payload["table"]["MyAgent"]["id/train"])    # {"mean", "sd", "n"} over evaluation roots
    print([d for d in payload["differences"] if d["a"] == "MyAgent"])

It runs the same cells, statistics and outputs as ``python -m benchmarks SUITE --rows ...`` (the
command-line way is ``--rows my_module:MyAgent``): the agent beside the named shipped rows and the
``milp`` ceiling, paired by evaluation root, written under ``out`` with the environment version, the
suite files' sha256, the commit and the agent's name and source fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import RESULTS_DIR
from mara_agents.protocols import Agent

#: Shipped rows every :func:`evaluate` table includes by default: EDF, the window probe, the
#: learning-aware allocator the learned rows were warm-started from, and the demand-aware admission rule.
AGAINST = ("edf", "window-edf", "lara-fm", "edf-admission:fm,min_reports=5", "edf-admission:oracle")


def evaluate(agent: str | Agent | Callable[[], Agent], suite: str = "paper", out: Path | str = RESULTS_DIR / "evaluate",
             name: str | None = None, against: Sequence[str] = AGAINST, scenarios: Sequence[str] | None = None,
             roots: int | None = None, episodes: int | None = None, workers: int = 1, progress: bool = False,
             task_set: str | None = None) -> dict[str, Any]:
    """Run ``agent`` through ``suite`` beside the shipped rows ``against``, the K-slot ceiling ``milp-slots`` (committed suites) and the slot-relaxed MILP (an upper bound).

    Args:
        agent: a row name (shipped, or third-party ``module.path:attr``), an :class:`Agent`, an Agent
            class, or a zero-argument factory returning one.
        suite: a cell-based suite (paper, stress, diagnostics, shaping, falsifier, scale).
        out: output directory (``OUT/SUITE/SUITE.{json,csv,md}``, cells cached in ``OUT/cells``).
        name: the row's name in the tables (default: the row string, or the class / factory name).
        against: shipped rows to run and pair with.
        scenarios: only these columns of the suite (default: all).
        roots: evaluation roots (default: all 10 of the committed suites).
        episodes: episodes per root (default: all).
        workers: parallel processes (in-memory agents run in this process: workers is then 1).
        progress: show a progress bar.
        task_set: a bank file of your own curves in place of the built-in task sets (the suite's scenarios
            on it, :func:`benchmarks.paper.bank_scenarios`; ``scenarios`` then names them, e.g. ``BANK/train``).

    Returns:
        The suite's payload (``table``, ``gap_closed``, ``differences`` — the agent against each of
        ``against`` and against the best fixed row — and the provenance fields).
    """
    from benchmarks.agents import REGISTERED, register
    from benchmarks.ceiling_cells import MILP, MILP_SLOTS
    from benchmarks.paper import SuiteSpec, for_task_set, specs
    from benchmarks.report import run_suite

    every = specs()
    if suite not in every:
        raise ValueError(f"unknown suite {suite!r}; cell-based suites: {sorted(every)}")
    spec = every[suite] if task_set is None else for_task_set(every[suite], task_set)
    if isinstance(agent, str):
        row = agent
    else:
        if not (isinstance(agent, Agent) or callable(agent)):
            raise TypeError(f"agent must be a row name, an Agent, an Agent class or a zero-argument factory, got {type(agent).__name__}")
        row = name or getattr(agent, "__name__", None) or type(agent).__name__
        if REGISTERED.get(row, (None,))[0] is not agent:
            register(row, agent)
        workers = 1
    chosen = spec.scenarios
    if scenarios is not None:
        unknown = sorted(set(scenarios) - {s.name for s in spec.scenarios})
        if unknown:
            raise ValueError(f"unknown scenarios {unknown}; {suite} has {[s.name for s in spec.scenarios]}")
        chosen = tuple(s for s in spec.scenarios if s.name in scenarios)
    run_spec = SuiteSpec(spec.name, spec.rows, chosen, spec.roots if roots is None else roots, episodes, spec.seeds)
    rows = list(dict.fromkeys([row, *against, *((MILP_SLOTS,) if task_set is None else ()), MILP]))  # K-slot ceilings: committed suites only
    argv = ["--rows", *rows] + (["--task-set", str(task_set)] if task_set is not None else [])
    return run_suite(run_spec, Path(out), rows, workers=workers, progress=progress, argv=argv,
                     compare=[(row, other) for other in against if other != row])
