"""A plain-Python step of discrete-node CoRE-Learning, written from the rules of docs/env.md ("A step"), for
tests only: no numba, no arenas, one environment, the state as named fields. tests/test_reference_step.py
checks the compiled engine against it on whole random episodes.

The loss a served task reports is the mean of its curve over the batches it trained this step: the curve
is piecewise constant per batch and, past its last batch, stays on its plateau (the mean of its last
max(10, L // 20) batches, at most all L). Both are computed here from the bank's raw per-batch losses
(``bank.curve(i)``), never from its precomputed prefix integrals, slopes or plateaus, and past the end of
a curve with this file's own plateau rule (no special case for far positions: Python's ints do not
overflow). The arithmetic is the engine's (a running sum of the losses, the interval mean as a difference
of integrals over its width, numpy's mean for the plateau), so that both agree to the last bit.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

LOSS_FLOOR = 1e-6


class Curve:
    """One hidden curve, from its raw per-batch losses: the loss at a batch position and the integral."""

    def __init__(self, losses) -> None:
        self.losses = [float(v) for v in losses]
        self.length = len(self.losses)
        window = min(self.length, max(10, self.length // 20))  # the plateau: mean of the last window
        self.plateau = float(np.mean(np.array(self.losses[self.length - window:])))
        self.prefix = [0.0]  # prefix[j]: the summed losses of batches 0 .. j-1, added one by one
        for v in self.losses:
            self.prefix.append(self.prefix[-1] + v)

    def loss_at(self, x: float) -> float:
        """The loss of the batch at position x >= 0 (the plateau from the end on)."""
        return self.losses[math.floor(x)] if x < self.length else self.plateau

    def integral(self, x: float) -> float:
        """The loss integrated over batches [0, x): whole batches, then the fraction of the next (or the plateau)."""
        if x < self.length:
            whole = math.floor(x)
            return self.prefix[whole] + (x - whole) * self.losses[whole]
        return self.prefix[self.length] + (x - self.length) * self.plateau


@dataclasses.dataclass
class Slot:
    """An admitted task (one per occupied slot)."""

    task: int
    arrival: int
    deadline: int
    target: float
    batches: float
    curve: Curve
    progress: float = 0.0
    integral: float = 0.0
    steps: int = 0
    first_loss: float = 0.0
    last_loss: float = 0.0
    log_span: float = 0.0
    phi: float = 0.0
    losses: list = dataclasses.field(default_factory=list)  # every reported loss, oldest first
    served_last: bool = False  # served in the last step


@dataclasses.dataclass
class Stats:
    arrived: int = 0
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    switches: int = 0
    busy_node_steps: int = 0
    wasted_node_steps: int = 0
    conflicts: int = 0
    invalid_actions: int = 0


class ReferenceEpisode:
    """One episode of ``workload`` under ``config`` (an EnvConfig), stepped by :meth:`step`."""

    def __init__(self, config, workload) -> None:
        self.config, self.w, self.bank = config, workload, workload.bank
        self.K, self.N = config.n_slots, config.n_nodes
        self.speeds = [float(s) for s in config.speeds]
        self.slots: list[Slot | None] = [None] * self.K
        self.node_slot = [-1] * self.N
        self.stats = Stats()
        self.t, self.next_task = 0, 0
        self.terminated = self.truncated = False
        self.potential = 0.0
        self.curves: dict[int, Curve] = {}  # built from the bank's raw losses when a task first needs one
        self._admit()
        self._update_done()

    # the curve ---------------------------------------------------------------------------------
    def _curve(self, i: int) -> Curve:
        if i not in self.curves:
            self.curves[i] = Curve(self.bank.curve(i))
        return self.curves[i]

    @staticmethod
    def _mean_loss(s: Slot, x0: float, x1: float) -> tuple[float, float]:
        """(the integral up to x1, the mean loss over [x0, x1)); a step too small to move the position in
        float64 reports the loss at x0 (the limit of the mean)."""
        value = s.curve.integral(x1)
        width = x1 - x0
        if width == 0.0:
            return value, s.curve.loss_at(x0)
        return value, (value - s.integral) / width

    # the rules ---------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def step(self, actions) -> dict:
        """One step; returns {"reward", "completed", "failed", "rejected", "conflict" (N,), "invalid" (N,)}."""
        out = {"completed": 0, "failed": 0, "rejected": 0, "conflict": [0] * self.N, "invalid": [0] * self.N}
        if not self.done:
            chosen = self._resolve(actions, out)
            out["completed"] = self._serve(chosen)
            self.node_slot = chosen
            self.t += 1
            out["failed"] = self._expire()
            out["rejected"] = self._admit()
            self._update_done()
        reward = float(out["completed"])
        if self.config.reward == "shaped":
            new = self.config.kappa * sum(s.phi for s in self.slots if s is not None and s.steps > 0)
            reward += new - self.potential
            self.potential = new
        out["reward"] = reward
        return out

    def _resolve(self, actions, out) -> list[int]:
        """Rule 1: a node choosing an empty slot idles (invalid); of nodes choosing one task, the lowest index
        trains it and the others idle (conflict)."""
        chosen = []
        for n, a in enumerate(int(x) for x in actions):
            k = a - 1
            if a > 0 and self.slots[k] is None:
                out["invalid"][n] = 1
                k = -1
            elif a > 0 and k in chosen:
                out["conflict"][n] = 1
                k = -1
            chosen.append(k)
        self.stats.conflicts += sum(out["conflict"])
        self.stats.invalid_actions += sum(out["invalid"])
        return chosen

    def _serve(self, chosen: list[int]) -> int:
        """Rules 2–3: each serving node trains its task for speed × batches (less the switching cost when the
        task has reported before and this node did not serve it last step); the task reports the mean loss over
        those batches; tasks at or below their target complete, after every node has trained."""
        reported = {}
        for s in self.slots:
            if s is not None:
                s.served_last = False
        for n, k in enumerate(chosen):
            if k < 0:
                continue
            s = self.slots[k]
            had_report = s.steps > 0
            switched = had_report and self.node_slot[n] != k
            batches = s.batches * self.speeds[n]
            if self.config.switch_cost > 0.0 and switched:
                batches = batches * (1.0 - self.config.switch_cost)
            value, loss = self._mean_loss(s, s.progress, s.progress + batches)
            self.stats.busy_node_steps += 1
            self.stats.switches += int(switched)
            s.progress, s.integral = s.progress + batches, value
            s.steps += 1
            if not had_report:
                s.first_loss = loss
                s.log_span = math.log(loss / s.target)
            s.last_loss = loss
            s.losses.append(loss)
            s.served_last = True
            s.phi = min(max(math.log(s.first_loss / loss) / s.log_span, 0.0), 1.0)
            reported[k] = loss
        completed = 0
        for k, loss in reported.items():
            if loss <= self.slots[k].target:
                self.slots[k] = None
                completed += 1
        self.stats.completed += completed
        return completed

    def _expire(self) -> int:
        """Rule 4: at the new t, every task whose deadline has come fails; its node-steps were wasted."""
        failed = 0
        for k, s in enumerate(self.slots):
            if s is not None and s.deadline <= self.t:
                self.stats.wasted_node_steps += s.steps
                self.slots[k] = None
                failed += 1
        self.stats.failed += failed
        return failed

    def _admit(self) -> int:
        """Rule 5: tasks arriving at t take the lowest free slot in task order; with every slot full they are rejected."""
        rejected = 0
        w = self.w
        while self.next_task < len(w) and w.arrival[self.next_task] <= self.t:
            i = self.next_task
            self.next_task += 1
            self.stats.arrived += 1
            if None not in self.slots:
                rejected += 1
                continue
            self.slots[self.slots.index(None)] = Slot(task=i, arrival=int(w.arrival[i]), deadline=int(w.deadline[i]), target=float(w.target[i]),
                                                      batches=float(w.batches_per_step[i]), curve=self._curve(int(w.curve[i])))
        self.stats.rejected += rejected
        return rejected

    def _update_done(self) -> None:
        """Rule 6: terminated once arrivals are over, every task arrived and no task is active; truncated at
        max_cycles otherwise."""
        active = sum(s is not None for s in self.slots)
        if self.t >= self.w.arrival_steps and self.next_task >= len(self.w) and active == 0:
            self.terminated = True
        if self.t >= self.config.max_cycles and not self.terminated:
            self.truncated = True

    def completion_rate_inputs(self) -> tuple[int, int]:
        return self.stats.completed, self.stats.arrived

    def slot_tasks(self) -> list[int]:
        return [-1 if s is None else s.task for s in self.slots]

    def last_losses(self) -> np.ndarray:
        return np.array([0.0 if s is None or s.steps == 0 else s.last_loss for s in self.slots])

    # the observation (docs/env.md, "Observation (per node)") -------------------------------------
    def observation(self, n: int, history: int) -> np.ndarray:
        """Node n's (D,) float32 observation: its own features, the global features, then per slot present,
        age / 100, steps to deadline / 100, node-steps / 100, last log loss, log target, log gap, the last
        H log losses (most recent first, zero-padded) and the served-last-step flag; clipped to ±1000."""
        N, K, T = self.N, self.K, self.w.arrival_steps
        log = lambda x: math.log(max(x, LOSS_FLOOR))  # noqa: E731
        out = [n / (N - 1) if N > 1 else 0.0, self.speeds[n], (self.node_slot[n] + 1) / K,
               self.t / T, max(T - self.t, 0) / T, sum(s is not None for s in self.slots) / K]
        for s in self.slots:
            if s is None:
                out += [0.0] * (8 + history)
                continue
            last = log(s.last_loss) if s.steps else 0.0
            gap = last - log(s.target) if s.steps else 0.0
            recent = [log(x) for x in reversed(s.losses)][:history]
            out += [1.0, (self.t - s.arrival) / 100, (s.deadline - self.t) / 100, s.steps / 100, last, log(s.target), gap,
                    *recent, *[0.0] * (history - len(recent)), float(s.served_last)]
        return np.clip(np.array(out), -1000.0, 1000.0).astype(np.float32)
