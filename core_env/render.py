"""Rendering: ``ansi`` (slot table with node assignments) and ``rgb_array`` (Gantt chart + losses).

``rgb_array`` needs matplotlib (optional extra ``plot``), imported only when an image is drawn, so the
env itself stays light; without it a clear ImportError names the extra. It draws on a private Agg
canvas (no pyplot, no global backend switch), so it is safe beside a user's interactive figures.
``human`` prints the ansi table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from core_env.episode import Episode

MISSING_MATPLOTLIB = ("render_mode='rgb_array' needs matplotlib, which is not installed: "
                      "pip install 'core-learning[plot]' (or pip install matplotlib)")
COLOURS = 20  # tasks cycle through the tab20 colours


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
    """A text table: one row per occupied slot with its task, timing, losses and the node serving it.

    The node column names the node that served the slot's task in the last step (empty if none did).
    """
    sim = episode.sim
    if not episode.started:
        return "(not reset)"
    stats = episode.statistics()
    lines = [f"t={stats['t']}  active={stats['active']}/{sim.K}  arrived={stats['arrived']}  completed={stats['completed']}  "
             f"failed={stats['failed']}  rejected={stats['rejected']}",
             f"{'slot':>4} {'task':>5} {'age':>4} {'left':>5} {'steps':>5} {'loss':>9} {'target':>9}  node"]
    # node_slot is last step's choice; a slot freed and refilled since then is not served_last.
    served_by = {int(k): n for n, k in enumerate(sim.node_slot[0]) if k >= 0 and sim.served_last[0, k]}
    for k in np.flatnonzero(sim.active[0]):
        steps = int(sim.steps[0, k])
        loss = f"{sim.last_loss[0, k]:9.4f}" if steps else f"{'-':>9}"
        node = f"node_{served_by[k]}" if k in served_by else ""
        lines.append(f"{k:>4} {sim.task[0, k]:>5} {sim.t[0] - sim.arrival[0, k]:>4} {sim.deadline[0, k] - sim.t[0]:>5} "
                     f"{steps:>5} {loss} {sim.target[0, k]:9.4f}  {node}")
    return "\n".join(lines)


def _matplotlib():
    """(Figure, FigureCanvasAgg, tab20 colormap), or an ImportError naming the ``plot`` extra."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(MISSING_MATPLOTLIB) from error
    return Figure, FigureCanvasAgg, matplotlib.colormaps["tab20"]


def render_rgb(episode: Episode) -> np.ndarray:
    """(H, W, 3) uint8 image of the episode so far.

    Top: node-by-step Gantt chart of every step since reset (colour = task, white = idle). Bottom: each
    task's reported losses (log scale) with its target as a dotted line of the same colour; a dot marks
    a report that reached the target (completion).
    """
    Figure, FigureCanvasAgg, cmap = _matplotlib()
    fig = Figure(figsize=(8, 6), dpi=80)
    canvas = FigureCanvasAgg(fig)
    gantt, losses = fig.subplots(2, 1)
    _draw_gantt(gantt, episode, cmap)
    _draw_losses(losses, episode, cmap)
    fig.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _draw_gantt(ax, episode: Episode, cmap) -> None:
    n_nodes = episode.config.n_nodes
    trace = np.array(episode.trace, dtype=np.int64).reshape(-1, n_nodes).T  # (N, T) task per node-step
    steps = trace.shape[1]
    colours = np.ones((n_nodes, max(steps, 1), 3))  # idle (and the empty chart at reset): white
    busy = trace >= 0
    colours[:, :steps][busy] = cmap(trace[busy] % COLOURS)[:, :3]
    ax.imshow(colours, aspect="auto", interpolation="nearest", origin="lower", extent=(0, max(steps, 1), -0.5, n_nodes - 0.5))
    ticks = np.unique(np.linspace(0, n_nodes - 1, min(n_nodes, 16)).round().astype(int))
    ax.set_yticks(ticks, [f"node_{i}" for i in ticks])
    ax.set_xlabel("step")
    ax.set_title("node assignments (colour = task, white = idle)")


def _draw_losses(ax, episode: Episode, cmap) -> None:
    reports: dict[int, list[tuple[int, float]]] = {}
    for t, served in enumerate(episode.trace_losses):
        for task, loss in served.items():
            reports.setdefault(task, []).append((t, loss))
    workload = episode.workload
    for task, points in reports.items():
        ts, ls = np.array(points).T
        colour = cmap(task % COLOURS)
        ax.plot(ts, ls, color=colour, lw=1)
        target = workload.target[task]
        ax.hlines(target, ts[0], ts[-1] + 1, colors=[colour], linestyles=":", lw=1)
        if ls[-1] <= target:
            ax.plot(ts[-1], ls[-1], "o", color=colour, ms=3)
    if reports:
        ax.set_yscale("log")
    ax.set_xlim(0, max(len(episode.trace_losses), 1))
    ax.set_xlabel("step")
    ax.set_ylabel("reported loss (dotted: target)")
