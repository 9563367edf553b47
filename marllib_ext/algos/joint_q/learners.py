"""Joint Q-learning learners: ``iql``, ``vdn``, ``qmix`` (MARLlib / PyMARL).

Every agent's online and target Q network runs once per replayed batch
(``JointQLearner.rows_view``); each team then takes its TD loss (``team_loss``):

- ``IQLLearner``: every agent its own double-Q target on its own reward (its team's
  summed reward with ``common_reward``, as EPyMARL);
- ``MixedQLearner`` (``VDNLearner``, ``QMIXLearner``): the team's mixer module mixes the
  chosen values into ``Q_tot`` (the sum for VDN, the hypernetwork mixer on the state for
  QMIX; the builder gives each algorithm its mixer) and the joint double-Q target on
  the team reward.

TD targets: one-step double Q, or with ``td_lambda`` the λ-returns over each replayed
episode (pymarl2). Target networks: a hard copy every ``target_network_update_freq``
sampled episodes (MARLlib), or Polyak averaging with ``tau`` after every update. The
math is in ``ops.joint_q`` and ``ops.td``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from ray.rllib.utils.annotations import override

from marllib_ext.algos.team_replay.algorithm import EPISODES_SAMPLED
from marllib_ext.algos.team_replay.learner import TeamLoss, TeamReplayLearner
from marllib_ext.ops.joint_q import chosen_action_values, double_q_next_values
from marllib_ext.ops.td import (
    common_rewards,
    episode_last_steps,
    masked_td_loss,
    moment_standardized_rewards,
    standardized_rewards,
    td_lambda_targets,
    td_targets,
    team_sum,
)
from marllib_ext.policies.q_agent import JointQMixer, target_module_id


@dataclass
class JointQBatch:
    """One replayed batch seen by every team: ``chosen (B, L, n)`` online values of the
    taken actions, ``next_values (B, L, n)`` double-Q bootstrap values, rewards
    ``(B, L, n)`` (each agent's team sum with ``common_reward``; standardized with
    ``reward_standardize``), ``mask (B, L)``.

    Agents absent at a step (dead, not yet arrived) have 0 in ``chosen`` and in
    ``next_values`` there: a mixer sums or mixes the agents present, and a dead
    agent's value is not bootstrapped past its death. ``present (B, L + 1, n)``."""

    columns: dict[str, torch.Tensor]
    chosen: torch.Tensor
    next_values: torch.Tensor
    rewards: torch.Tensor
    mask: torch.Tensor
    present: torch.Tensor

    @property
    def length(self) -> int:
        return self.mask.shape[1]


def observed_lengths(mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` observations each row's values are read on: its last real step (of
    ``mask (B, L)``) and the observation after it, ``max{t : mask_t > 0} + 2`` (1 for a
    row without one). Past them, values are multiplied by 0 (``present`` is 0 there)."""
    steps = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return (steps * (mask > 0)).amax(dim=1) + 1


def team_step_mean(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean over real team steps of ``values`` ``(B, L)``, or of its sum over the agents
    that acted for per-agent ``(B, L, k)`` values (IQL) with ``valid`` ``(B, L, k)``."""
    if values.dim() == 2:
        return values[valid].mean()
    return (values * valid).sum(-1)[valid.any(-1)].mean()


class JointQLearner(TeamReplayLearner):
    """Agent Q networks on the team batch; ``team_loss`` is the algorithm's."""

    @override(TeamReplayLearner)
    def build(self) -> None:
        super().build()
        self.last_target_sync = 0
        self.agents_of_policy: dict[str, list[int]] = {}
        for index, agent in enumerate(self.agents):
            self.agents_of_policy.setdefault(self.policy_of[agent], []).append(index)

    @override(TeamReplayLearner)
    def observe_batch(self, columns: dict[str, torch.Tensor]) -> None:
        if self.settings.running_reward_moments:  # this batch's rewards count, as in EPyMARL
            rewards = columns["rewards"][columns["mask"].bool()]  # (N, n)
            if self.settings.common_reward:  # the moments of the team sums, one per team
                rewards = torch.stack([team_sum(rewards, i) for i in self.teams.values()], -1)
            self.module[self.first_team].observe_rewards(rewards)

    @override(TeamReplayLearner)
    def optimizer_for(self, module_id, params):
        settings = self.settings
        if settings.optimizer == "rmsprop":
            eps = 1e-5 if settings.optimizer_eps is None else settings.optimizer_eps
            optimizer = torch.optim.RMSprop(
                params, lr=settings.lr, alpha=settings.rmsprop_alpha, eps=eps
            )
            return optimizer, settings.lr
        eps = 1e-8 if settings.optimizer_eps is None else settings.optimizer_eps
        return torch.optim.Adam(params, lr=settings.lr, eps=eps), settings.lr

    def agent_q_values(
        self, obs: torch.Tensor, *, target: bool, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(B, L + 1, n, d)`` observations -> ``(B, L + 1, n, A)`` per-agent values.

        The agents of one policy run as one batch of sequences: one GRU call
        instead of ``k`` (each row's values are its own, whatever rows run beside it).
        ``lengths (B,)``: each episode's observed steps (``segmented_unroll``); GRU
        agents on the CPU unroll none past them (the values there are not read)."""
        batch, steps = obs.shape[:2]
        values = [None] * len(self.agents)
        for policy, indices in self.agents_of_policy.items():
            network = self.module[target_module_id(policy) if target else policy]
            rows = obs[:, :, indices, : self.obs_dim_of[self.agents[indices[0]]]]
            rows = rows.transpose(1, 2).reshape(batch * len(indices), steps, -1)
            row_lengths = None if lengths is None else lengths.repeat_interleave(len(indices))
            q = network.q_sequence(rows, row_lengths).reshape(batch, len(indices), steps, -1)
            for k, index in enumerate(indices):
                values[index] = q[:, k]
        return torch.stack(values, dim=2)

    @override(TeamReplayLearner)
    def whole_batch_columns(self, columns: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        mask, rewards = columns["mask"], columns["rewards"]
        if self.settings.common_reward:
            rewards = common_rewards(rewards, list(self.teams.values()))
        if self.settings.running_reward_moments:
            moments = self.module[self.first_team]
            rewards = moment_standardized_rewards(
                rewards, mask, moments.reward_mean, moments.reward_var
            )
        elif self.settings.reward_standardize:
            rewards = standardized_rewards(rewards, mask)
        return {**columns, "rewards": rewards}

    @override(TeamReplayLearner)
    def rows_view(self, columns: dict[str, torch.Tensor]) -> JointQBatch:
        """``columns`` with the rewards of ``whole_batch_columns``."""
        obs, mask, rewards = columns["obs"], columns["mask"], columns["rewards"]
        if not self.settings.bootstrap_truncated:  # every stored episode is whole
            columns = {**columns, "terminated": episode_last_steps(mask)}
        length = mask.shape[1]
        # segmented_unroll: each row's observed steps, so GRU agents skip the padding
        observed = observed_lengths(mask) if self.settings.segmented_unroll else None
        q = self.agent_q_values(obs, target=False, lengths=observed)  # (B, L + 1, n, A)
        next_mask = columns["action_mask"][:, 1:] if "action_mask" in columns else None
        with torch.no_grad():
            target_q = self.agent_q_values(obs, target=True, lengths=observed)
            next_values = double_q_next_values(
                q[:, 1:].detach(), target_q[:, 1:], next_mask
            )  # (B, L, n)
        present = columns["present"]
        next_values = next_values * present[:, 1:]
        chosen = chosen_action_values(q[:, :length], columns["actions"])  # (B, L, n)
        chosen = chosen * present[:, :length]
        return JointQBatch(columns, chosen, next_values, rewards, mask, present)

    def targets(self, rewards, terminated, next_values, mask) -> torch.Tensor:
        """One-step double-Q targets, or with ``td_lambda`` the λ-returns over each
        replayed episode (``ops.td.td_lambda_targets``)."""
        settings = self.settings
        if settings.td_lambda is None:
            return td_targets(rewards, terminated, next_values, settings.gamma)
        return td_lambda_targets(
            rewards, terminated, next_values, mask, settings.gamma, settings.td_lambda
        )

    def _team_loss(self, values, targets, view: JointQBatch, td_errors, mask=None) -> TeamLoss:
        """``mask``: the loss rows (default: the batch's real steps)."""
        mask = view.mask if mask is None else mask
        loss = masked_td_loss(values, targets, mask, view.columns["weights"])
        if mask.dim() == 3:  # per-agent rows (IQL): absent agents hand no TD error
            td_errors = td_errors * mask
        valid = mask.bool()
        return TeamLoss(
            loss=loss,
            td_errors=td_errors,
            valid=valid if valid.dim() == 2 else valid.any(-1),
            terms={"values": values, "targets": targets, "mask": mask},
            metrics={
                "q_mean": team_step_mean(values, valid),
                "target_mean": team_step_mean(targets, valid),
                "td_loss": loss.detach(),
            },
        )

    @override(TeamReplayLearner)
    def target_step(self, timesteps: dict[str, Any]) -> float | None:
        if self.settings.tau is not None:
            return self.settings.tau
        episodes = int(timesteps.get(EPISODES_SAMPLED, 0))
        if episodes - self.last_target_sync >= self.settings.target_network_update_freq:
            self.last_target_sync = episodes
            return 1.0
        return None


class IQLLearner(JointQLearner):
    """``iql``: every agent its own double-Q target ``r_i + gamma Q_i'(o_i', a*_i)``, on
    the steps where it acted; an agent's death ends its own bootstrapping."""

    @override(TeamReplayLearner)
    def team_loss(self, *, module_id, agent_index, view: JointQBatch) -> TeamLoss:
        values = view.chosen[..., agent_index]
        terminated = torch.maximum(
            view.columns["terminated"].unsqueeze(-1),
            view.columns["agent_terminated"][..., agent_index],
        )
        acted = view.mask.unsqueeze(-1) * view.present[:, : view.length][..., agent_index]
        targets = self.targets(
            view.rewards[..., agent_index], terminated, view.next_values[..., agent_index], acted
        )
        return self._team_loss(values, targets, view, (targets - values).detach(), acted)


class MixedQLearner(JointQLearner):
    """The team's mixer mixes the chosen values into ``Q_tot``; the target mixer mixes
    the bootstrap values; one TD target on the team reward."""

    @override(TeamReplayLearner)
    def team_loss(self, *, module_id, agent_index, view: JointQBatch) -> TeamLoss:
        mixer: JointQMixer = self.module[module_id]
        state = view.columns["state"]
        values = mixer.mix(view.chosen[..., agent_index], state[:, : view.length])
        with torch.no_grad():
            next_total = mixer.mix(view.next_values[..., agent_index], state[:, 1:], target=True)
        targets = self.targets(
            self.team_reward(view, agent_index), view.columns["terminated"], next_total, view.mask
        )
        return self._team_loss(values, targets, view, (targets - values).detach().unsqueeze(-1))

    def team_reward(self, view: JointQBatch, agent_index: list[int]) -> torch.Tensor:
        """The reward ``(B, L)`` that ``Q_tot``'s target is built on: ``sum_i r_i`` over
        the team, or with ``common_reward`` the team's sum that every agent already
        holds (once, not ``n`` copies)."""
        if self.settings.common_reward:
            return view.rewards[..., agent_index[0]]
        return team_sum(view.rewards, agent_index)

    @override(TeamReplayLearner)
    def observe_batch(self, columns: dict[str, torch.Tensor]) -> None:
        super().observe_batch(columns)
        mask = columns["mask"].bool()
        states = columns["state"][:, : mask.shape[1]][mask]
        for module_id in self.teams:
            self.module[module_id].observe_states(states)


class VDNLearner(MixedQLearner):
    """``vdn``: ``Q_tot = sum_i Q_i`` (its team modules are VDN mixers)."""


class QMIXLearner(MixedQLearner):
    """``qmix``: ``Q_tot`` from the monotonic hypernetwork mixer on the state (its team
    modules are QMIX mixers, whose state moments ``observe_batch`` updates)."""
