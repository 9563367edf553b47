"""What a trained joint-Q learner's values look like, on episodes from its own replay
store: why one mixer learns slower than another is read here before any tuning.

    python benchmarks/joint_q_mechanism.py RUN_DIR [RUN_DIR ...] --episodes 64

Each ``RUN_DIR`` is a ``fit`` run directory (``checkpoint/``, ``progress.csv``). Per run,
on ``--episodes`` whole episodes drawn uniformly from the restored store, with the
learner's own reward transform and targets (``batch_view``, ``team_loss``):

- scale: the mean ``Q_tot(s_t, a_t)`` against the mean discounted return-to-go
  ``G_t = sum_k gamma^k r_{t+k}`` of the same rows (the learner's reward units);
- the state-only part of the mixer: ``|mix(0, s)|``, the value it gives agents worth 0;
- the mixer's weights: ``dQ_tot / dQ_i`` per row and agent (mean, and the share of
  rows where an agent's weight is below 0.05, an agent the mixer ignores);
- the agents' greedy margins: ``max_a Q_i - max_{a != a*} Q_i`` over the legal actions
  at the rows where an agent acts (mean and median), against the TD error's size;
- the TD error by episode step: mean ``|target - Q_tot|`` at step 0, steps 1-4, 5-14,
  15 onward and the last step of each episode;
- from ``progress.csv``: the exploration (epsilon) when the training success rate first
  exceeds 0 and 0.5, and at the end.
"""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path

import common
import numpy as np
import ray
import torch

from marllib_ext.ops.joint_q import action_gaps
from marllib_ext.ops.mixers import qmix_hidden_preactivations

STEP_BINS = ((0, 1), (1, 5), (5, 15), (15, 10**6))


def returns_to_go(rewards: np.ndarray, mask: np.ndarray, gamma: float) -> np.ndarray:
    """``(B, L)`` team rewards on ``mask`` rows -> discounted returns-to-go."""
    out = np.zeros_like(rewards)
    running = np.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running * mask[:, t]
        out[:, t] = running * mask[:, t]
    return out


def exploration_at_success(progress: Path) -> dict[str, float]:
    rows = list(csv.DictReader(progress.open()))
    out = {"eps_first_win": math.nan, "eps_half_wins": math.nan, "eps_end": math.nan}
    if not rows:
        return out
    out["eps_end"] = float(rows[-1].get("replay_exploration", "nan") or "nan")
    for row in rows:
        rate = float(row.get("success_rate", "nan") or "nan")
        eps = float(row.get("replay_exploration", "nan") or "nan")
        if rate > 0 and math.isnan(out["eps_first_win"]):
            out["eps_first_win"] = eps
        if rate > 0.5 and math.isnan(out["eps_half_wins"]):
            out["eps_half_wins"] = eps
    return out


def mixer_preactivations(mixer, agent_values: torch.Tensor, state: torch.Tensor):
    """``(B, L, embed)`` the online QMIX mixer's hidden pre-activations
    ``Q @ |w1(s)| + b1(s)`` (before the ELU) of ``agent_values (B, L, k)``."""
    hyper = mixer.hypernetworks
    batch, length, k = agent_values.shape
    flat_state = mixer.mixer_input(state.reshape(batch * length, -1))
    w1 = hyper.w1(flat_state).view(-1, k, hyper.embed_dim)
    pre = qmix_hidden_preactivations(agent_values.reshape(-1, k), w1, hyper.b1(flat_state))
    return pre.view(batch, length, -1)


def mechanism(run_dir: Path, episodes: int, seed: int) -> dict[str, float]:
    from ray.rllib.algorithms.algorithm import Algorithm

    from marllib_ext.algos.restore import register_checkpoint_env
    from marllib_ext.ops.td import team_sum
    from marllib_ext.rllib_compat import local_learner

    checkpoint = run_dir / "checkpoint"
    register_checkpoint_env(checkpoint)
    algorithm = Algorithm.from_checkpoint(str(checkpoint.resolve()))
    try:
        learner = local_learner(algorithm)
        np.random.seed(seed)
        sampled = algorithm.store.sample_episodes(min(episodes, len(algorithm.store)))
        columns = {k: torch.as_tensor(v) for k, v in sampled.columns().items() if v is not None}
        view = learner.batch_view(columns)
        module_id, agent_index = next(iter(learner.teams.items()))
        chosen = view.chosen.detach().requires_grad_(True)
        view.chosen = chosen
        term = learner.team_loss(module_id=module_id, agent_index=agent_index, view=view)
        values, targets, mask = term.terms["values"], term.terms["targets"], term.terms["mask"]
        if values.dim() == 3:  # iql: per-agent rows; the team's sum stands for Q_tot
            values, targets, mask = values.sum(-1), targets.sum(-1), mask.amax(-1)
            team_rewards = team_sum(view.rewards, agent_index)
        else:  # the reward Q_tot's target is built on (common_reward: the sum, once)
            team_rewards = learner.team_reward(view, agent_index)
        (weights,) = torch.autograd.grad(values.sum(), chosen)
        mixer = learner.module[module_id]
        state = columns["state"][:, : view.length]
        with torch.no_grad():
            agent_q = learner.agent_q_values(columns["obs"], target=False)[:, : view.length]
            legal = columns.get("action_mask")
            if legal is not None:
                legal = legal[:, : view.length][..., agent_index, :]
            gaps = action_gaps(agent_q[..., agent_index, :], legal)
            if hasattr(mixer, "mix") and getattr(mixer, "mixer_name", "none") == "qmix":
                zero = torch.zeros_like(chosen[..., agent_index])
                state_part = mixer.mix(zero, state).abs()
                hidden = mixer_preactivations(mixer, chosen[..., agent_index], state)
            else:
                state_part = torch.zeros_like(values)
                hidden = None
    finally:
        algorithm.stop()
    m = mask.detach().numpy().astype(bool)
    rewards = team_rewards.detach().numpy()
    gamma = learner.settings.gamma
    g = returns_to_go(rewards, m.astype(float), gamma)
    td = (targets - values).detach().abs().numpy()
    present = (
        columns["present"][:, : view.length][..., agent_index].numpy().astype(bool) & m[..., None]
    )
    w = weights[..., agent_index].numpy()
    row = {
        "episodes": float(m.shape[0]),
        "q_tot": float(values.detach().numpy()[m].mean()),
        "return_to_go": float(g[m].mean()),
        "state_part": float(state_part.numpy()[m].mean()),
        "weight_mean": float(w[present].mean()),
        "weight_below_0.05": float((w[present] < 0.05).mean()),
        "td_abs": float(td[m].mean()),
        "gap_mean": float(np.nanmean(gaps.numpy()[present])),
        "gap_median": float(np.nanmedian(gaps.numpy()[present])),
        # The mixer's hidden units on the ELU's flat side (slope exp(x) < 0.14): there
        # the agents' values barely move Q_tot.
        "hidden_below_-2": float((hidden.numpy()[m] < -2).mean()) if hidden is not None else 0.0,
        "hidden_mean": float(hidden.numpy()[m].mean()) if hidden is not None else 0.0,
    }
    steps = np.arange(m.shape[1])[None].repeat(m.shape[0], 0)
    for low, high in STEP_BINS:
        rows = m & (steps >= low) & (steps < high)
        row[f"td_t{low}-{min(high, 99) - 1}"] = float(td[rows].mean()) if rows.any() else math.nan
    last = m.sum(1) - 1
    row["td_last"] = float(td[np.arange(m.shape[0]), last].mean())
    row.update(exploration_at_success(run_dir / "progress.csv"))
    return row


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    common.start_ray(num_cpus=1)
    try:
        rows = {str(run): mechanism(run, args.episodes, args.seed) for run in args.runs}
    finally:
        ray.shutdown()
    keys = list(next(iter(rows.values())))
    print("| run | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for run, row in rows.items():
        print(f"| {run} | " + " | ".join(f"{row[k]:.3g}" for k in keys) + " |")


if __name__ == "__main__":
    main()
