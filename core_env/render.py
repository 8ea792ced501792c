"""Rendering: ``ansi`` (slot table with node assignments) and ``rgb_array`` (Gantt chart + losses).

``rgb_array`` is drawn with numpy alone, so every install renders (no matplotlib, no font, no global
state): a fixed :data:`WIDTH` x :data:`HEIGHT` image, the node-by-step Gantt chart on top and the reported
losses below, on one step axis. It carries no text; ``ansi`` has the numbers. ``human`` prints the ansi table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from core_env.episode import Episode

#: The image's size in pixels.
WIDTH, HEIGHT = 640, 480
#: Tasks cycle through these colours (matplotlib's tab20); idle node-steps and the background are white.
PALETTE = np.array([(31, 119, 180), (174, 199, 232), (255, 127, 14), (255, 187, 120), (44, 160, 44), (152, 223, 138),
                    (214, 39, 40), (255, 152, 150), (148, 103, 189), (197, 176, 213), (140, 86, 75), (196, 156, 148),
                    (227, 119, 194), (247, 182, 210), (127, 127, 127), (199, 199, 199), (188, 189, 34), (219, 219, 141),
                    (23, 190, 207), (158, 218, 229)], np.uint8)
WHITE, FRAME, GRID = (255, 255, 255), (64, 64, 64), (220, 220, 220)
#: Panels as (top, bottom, left, right) pixel bounds, inside a one-pixel frame: the Gantt chart (a row per
#: node, a column band per step) and the losses (log scale, every report of a task joined by a line; its
#: target dotted; a square where a report reached the target).
GANTT = (12, 212, 12, 628)
LOSSES = (232, 468, 12, 628)


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


def render_rgb(episode: Episode) -> np.ndarray:
    """(:data:`HEIGHT`, :data:`WIDTH`, 3) uint8 image of the episode so far (see :data:`GANTT` and :data:`LOSSES`)."""
    image = np.full((HEIGHT, WIDTH, 3), WHITE, np.uint8)
    steps = len(episode.trace)
    _draw_gantt(image, episode, steps)
    _draw_losses(image, episode, steps)
    for top, bottom, left, right in (GANTT, LOSSES):
        image[[top - 1, bottom], left - 1:right + 1] = FRAME
        image[top - 1:bottom + 1, [left - 1, right]] = FRAME
    return image


def colour(task: int | np.ndarray) -> np.ndarray:
    """The colour of a task (or an array of tasks): :data:`PALETTE`, cycled."""
    return PALETTE[np.asarray(task) % len(PALETTE)]


def _step_columns(steps: int, left: int, right: int) -> np.ndarray:
    """The step shown in each pixel column of a panel (``steps`` equal bands; one when nothing was played)."""
    return (np.arange(right - left) * max(steps, 1)) // (right - left)


def _draw_gantt(image: np.ndarray, episode: Episode, steps: int) -> None:
    top, bottom, left, right = GANTT
    n_nodes = episode.config.n_nodes
    if steps:
        trace = np.array(episode.trace, dtype=np.int64).reshape(steps, n_nodes).T  # (N, T) task per node-step
        rows = (np.arange(bottom - top) * n_nodes) // (bottom - top)
        tasks = trace[rows[:, None], _step_columns(steps, left, right)[None, :]]
        image[top:bottom, left:right][tasks >= 0] = colour(tasks[tasks >= 0])
    if (bottom - top) // n_nodes >= 4:  # a light line between nodes where rows are tall enough to show it
        image[top + ((bottom - top) * np.arange(1, n_nodes)) // n_nodes, left:right] = GRID


def _draw_losses(image: np.ndarray, episode: Episode, steps: int) -> None:
    top, bottom, left, right = LOSSES
    reports: dict[int, list[tuple[int, float]]] = {}
    for t, served in enumerate(episode.trace_losses):
        for task, loss in served.items():
            reports.setdefault(task, []).append((t, loss))
    if not reports:
        return
    targets = {task: float(episode.workload.target[task]) for task in reports}
    logs = _log([loss for points in reports.values() for _, loss in points] + list(targets.values()))
    low, high = float(logs.min()), float(logs.max())
    span = high - low or 1.0
    width = right - left

    def x(t: np.ndarray) -> np.ndarray:
        return left + np.minimum(((t + 0.5) * width) // max(steps, 1), width - 1).astype(np.int64)

    def y(loss: np.ndarray) -> np.ndarray:
        level = (_log(loss) - low) / span
        return (bottom - 1 - np.round(level * (bottom - top - 1))).astype(np.int64)

    for task, points in reports.items():
        ts, losses = (np.array(column) for column in zip(*points))
        paint = colour(task)
        target_row = y(np.array([targets[task]]))[0]
        dots = np.arange(x(ts[:1])[0], x(ts[-1:] + 1)[0] + 1)
        image[target_row, dots[(dots // 3) % 2 == 0]] = paint  # the target, dotted
        image[_polyline(y(losses), x(ts))] = paint
        if losses[-1] <= targets[task]:
            row, column = y(losses[-1:])[0], x(ts[-1:])[0]
            image[max(row - 2, top):min(row + 3, bottom), max(column - 2, left):min(column + 3, right)] = paint


def _log(losses) -> np.ndarray:
    """log10 of losses, kept within 1e-12..1e12 (a non-finite report sits at the top)."""
    return np.log10(np.clip(np.nan_to_num(np.asarray(losses, float), nan=1e12, posinf=1e12, neginf=1e-12), 1e-12, 1e12))


def _polyline(rows: np.ndarray, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pixel (rows, columns) of the line through the points, every segment sampled once per pixel."""
    if rows.size == 1:
        return rows, columns
    counts = np.maximum(np.abs(np.diff(rows)), np.abs(np.diff(columns))) + 1
    share = np.concatenate([np.arange(n) / max(n - 1, 1) for n in counts])
    start = np.repeat(np.arange(counts.size), counts)
    line_rows = np.round(rows[start] + share * (rows[start + 1] - rows[start])).astype(np.int64)
    line_columns = np.round(columns[start] + share * (columns[start + 1] - columns[start])).astype(np.int64)
    return line_rows, line_columns
