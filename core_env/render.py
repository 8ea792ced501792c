"""Rendering: ``ansi`` (slot table with node assignments) and ``rgb_array`` (Gantt chart + losses).

``rgb_array`` needs matplotlib (optional extra ``plot``); without it a clear ImportError says how to
install it. ``human`` prints the ansi table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from core_env.episode import Episode


def render(episode: Episode, mode: str):
    if mode == "ansi":
        return render_ansi(episode)
    if mode == "rgb_array":
        return render_rgb(episode)
    if mode == "human":
        print(render_ansi(episode))
        return None
    raise ValueError(f"unknown render mode {mode!r}")


def render_ansi(episode: Episode) -> str:
    """A text table: one row per occupied slot with its task, timing, losses and serving node."""
    sim = episode.sim
    if not episode.started:
        return "(not reset)"
    stats = episode.statistics()
    lines = [f"t={stats['t']}  active={stats['active']}/{sim.K}  arrived={stats['arrived']}  completed={stats['completed']}  "
             f"failed={stats['failed']}  rejected={stats['rejected']}",
             f"{'slot':>4} {'task':>5} {'age':>4} {'left':>5} {'steps':>5} {'loss':>9} {'target':>9}  node"]
    served_by = {int(k): n for n, k in enumerate(sim.node_slot[0]) if k >= 0}
    for k in np.flatnonzero(sim.active[0]):
        steps = int(sim.steps[0, k])
        loss = f"{sim.last_loss[0, k]:9.4f}" if steps else f"{'-':>9}"
        node = f"node_{served_by[k]}" if k in served_by else ""
        lines.append(f"{k:>4} {sim.task[0, k]:>5} {sim.t[0] - sim.arrival[0, k]:>4} {sim.deadline[0, k] - sim.t[0]:>5} "
                     f"{steps:>5} {loss} {sim.target[0, k]:9.4f}  {node}")
    return "\n".join(lines)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError("render_mode='rgb_array' needs matplotlib: pip install 'core-learning[plot]' (or pip install matplotlib)") from error
    return plt


def render_rgb(episode: Episode) -> np.ndarray:
    """(H, W, 3) uint8: node-by-time Gantt chart (colour = task) and each task's reported loss vs target."""
    plt = _pyplot()
    fig, (gantt, losses) = plt.subplots(2, 1, figsize=(8, 6), dpi=80)
    trace = np.array(episode.trace) if episode.trace else np.full((0, episode.config.n_nodes), -1)
    cmap = plt.get_cmap("tab20")
    for node in range(trace.shape[1]):
        for t, task in enumerate(trace[:, node]):
            if task >= 0:
                gantt.barh(node, 1, left=t, color=cmap(task % 20), edgecolor="none")
    gantt.set_yticks(range(trace.shape[1]), [f"node_{i}" for i in range(trace.shape[1])])
    gantt.set_xlabel("step")
    gantt.set_title("node assignments (colour = task)")
    reports: dict[int, list[tuple[int, float]]] = {}
    for t, served in enumerate(episode.trace_losses):
        for task, loss in served.items():
            reports.setdefault(task, []).append((t, loss))
    workload = episode.workload
    for task, points in reports.items():
        ts, ls = zip(*points)
        line = losses.plot(ts, ls, color=cmap(task % 20), lw=1)[0]
        if workload is not None:
            losses.hlines(workload.target[task], ts[0], ts[-1], colors=line.get_color(), linestyles=":", lw=1)
    losses.set_yscale("log")
    losses.set_xlabel("step")
    losses.set_ylabel("reported loss (dotted: target)")
    fig.tight_layout()
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return image
