"""Team rewards: ``sparse`` (tasks completed this step) and ``shaped`` (potential-based, γ = 1).

Shaped: r' = r + Φ(s') − Φ(s), Φ(s) = κ Σ_active φ_k with the log-progress
φ_k = clip(log(l0_k / l_k) / log(l0_k / eps_k), 0, 1), l0_k the task's first reported loss, l_k its
latest and eps_k its target; φ = 0 before a task's first report and after it leaves. The shaping terms
telescope: the undiscounted shaped return of an episode is its completions + Φ(s_T) − Φ(s_0), and
Φ(s_0) = 0 (no task has reported at reset). A terminated episode ends with no active task (the arrival
window is over and every task has completed or failed), so Φ(s_T) = 0 and the return equals the number
of completions exactly (up to float rounding). An episode truncated by ``max_cycles`` may end with tasks
in progress: its return is completions + Φ(s_T), the potential still held by those tasks (in
[0, κ·K]). Every info reports the current Φ(s) as ``potential`` (0 with ``sparse``), so the return so far
always equals ``completed`` + ``potential`` (up to float rounding). A failing task gives its progress
back when it leaves; a completing one is refunded by +1.

Computed once, inside the compiled step, by :func:`core_env.rules.team_reward` (rule 7): φ_k is kept per slot
(``phi``, updated when the slot reports, with log(l0 / eps) fixed at its first report), Φ per environment
(``Simulator.potential``) and the step's team reward in ``Simulator.reward``.
"""
