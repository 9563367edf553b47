"""Deterministic actor-critic learners on replayed team transitions: ``iddpg``,
``maddpg``, ``facmac`` (MARLlib's DDPG family).

Per team, one backward pass takes the critic TD loss and the actors' deterministic
policy loss (the critics held fixed in the actor term); then every target is
Polyak-averaged with ``tau`` (``ops/ddpg.py`` has the equations):

- ``IDDPGLearner``: a critic per policy on ``(o_i, a_i)``, each agent its own reward;
- ``MADDPGLearner``: a central critic per policy on ``(s, a_1..a_n)`` of the team, the
  team reward; actor i is updated through its own action, the others' from the batch;
- ``FACMACLearner``: per-agent critics ``Q_i(o_i, a_i)`` mixed into ``Q_tot`` by the
  team's mixer on the state; every actor is updated through the mixed critic with all
  current actions.

With ``twin_q`` every critic (and FACMAC's mixer) has a twin that regresses on the same
target; the critic loss is the **mean** of the two critics' masked squared errors, so
each critic gets half the step it would get alone.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from ray.rllib.utils.annotations import override

from marllib_ext.algos.team_replay.learner import TeamLoss, TeamReplayLearner
from marllib_ext.ops.ddpg import (
    deterministic_policy_loss,
    joint_actions_with_own,
    smoothed_target_actions,
)
from marllib_ext.ops.td import masked_td_loss, standardized_rewards, td_targets, team_sum
from marllib_ext.policies.ddpg import DDPGCritic, DeterministicActorRLModule, critic_module_id
from marllib_ext.policies.q_agent import JointQMixer, target_module_id


@contextlib.contextmanager
def held_fixed(*modules: torch.nn.Module):
    """Gradients pass through ``modules`` to their inputs but not into their weights."""
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


@dataclass
class DDPGBatch:
    """One replayed batch of team transitions seen by every team: ``(B, n, d)``
    observations now and next, ``(B, s)`` states, ``(B, n, a)`` taken, current-policy
    and (smoothed) target actions, ``(B, n)`` rewards, ``(B,)`` terminated and mask.

    ``present``/``next_present`` ``(B, n)``: 1 where the agent acts now / at the next
    step. An absent agent's taken, current-policy and target actions are zeros (it
    takes none), its values leave the mixers, and a dead agent is not bootstrapped past
    its death (``agent_done``)."""

    obs: torch.Tensor
    next_obs: torch.Tensor
    state: torch.Tensor
    next_state: torch.Tensor
    actions: torch.Tensor
    policy_actions: torch.Tensor
    next_actions: torch.Tensor
    rewards: torch.Tensor
    done: torch.Tensor
    mask: torch.Tensor
    weights: torch.Tensor
    present: torch.Tensor
    next_present: torch.Tensor
    agent_done: torch.Tensor  # (B, n) done for the team or dead after this step

    def acted(self, agent_index) -> torch.Tensor:
        """``(B, k)`` real steps where each of ``agent_index`` acted."""
        return self.mask[:, None] * self.present[:, agent_index]


def critic_loss_with_twin(
    values: torch.Tensor,
    twin_values: torch.Tensor | None,
    targets: torch.Tensor,
    batch,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``masked_td_loss`` of ``values`` ``(B, k)`` on ``targets`` ``(B, k)`` over
    ``mask`` ``(B, k)`` (default: every real step); with a twin, of both critics'
    columns side by side: the mean of the two critics' errors."""
    mask = batch.mask[:, None].expand_as(values) if mask is None else mask
    if twin_values is not None:
        values = torch.cat([values, twin_values], -1)
        targets = torch.cat([targets, targets], -1)
        mask = torch.cat([mask, mask], -1)
    return masked_td_loss(values.unsqueeze(1), targets.unsqueeze(1), mask[:, None], batch.weights)


class DDPGLearner(TeamReplayLearner):
    """Actors and targets of the family; ``team_loss`` is the algorithm's."""

    @override(TeamReplayLearner)
    def optimizer_for(self, module_id, params):
        is_actor = isinstance(self.module[module_id], DeterministicActorRLModule)
        lr = self.settings.actor_lr if is_actor else self.settings.critic_lr
        return torch.optim.Adam(params, lr=lr), lr

    def actor(self, index: int, *, target: bool = False) -> DeterministicActorRLModule:
        policy = self.policy_of[self.agents[index]]
        return self.module[target_module_id(policy) if target else policy]

    def critic(self, index: int) -> DDPGCritic:
        return self.module[critic_module_id(self.policy_of[self.agents[index]])]

    def agent_obs(self, obs: torch.Tensor, index: int) -> torch.Tensor:
        return obs[:, index, : self.obs_dim_of[self.agents[index]]]

    def target_action(self, index: int, next_obs: torch.Tensor) -> torch.Tensor:
        """``mu'_i(o'_i)``, smoothed by clipped noise with ``smooth_target_policy``."""
        actor = self.actor(index, target=True)
        actions = actor.actions(next_obs)
        if not self.settings.smooth_target_policy:
            return actions
        return smoothed_target_actions(
            actions,
            self.settings.target_noise,
            self.settings.target_noise_clip,
            actor.low,
            actor.high,
            torch.randn_like(actions),
        )

    @override(TeamReplayLearner)
    def whole_batch_columns(self, columns: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if not self.settings.reward_standardize:
            return columns
        return {**columns, "rewards": standardized_rewards(columns["rewards"], columns["mask"])}

    @override(TeamReplayLearner)
    def rows_view(self, columns: dict[str, torch.Tensor]) -> DDPGBatch:
        """``columns`` (single transitions) with the rewards of ``whole_batch_columns``."""
        obs, next_obs = columns["obs"][:, 0], columns["obs"][:, 1]  # (B, n, d)
        mask = columns["mask"][:, 0]
        rewards = columns["rewards"][:, 0]  # (B, n)
        n_agents = len(self.agents)
        present, next_present = columns["present"][:, 0], columns["present"][:, 1]
        policy_actions = (
            torch.stack(
                [self.actor(i).actions(self.agent_obs(obs, i)) for i in range(n_agents)], dim=1
            )
            * present[..., None]
        )
        with torch.no_grad():
            next_actions = (
                torch.stack(
                    [self.target_action(i, self.agent_obs(next_obs, i)) for i in range(n_agents)],
                    dim=1,
                )
                * next_present[..., None]
            )
        return DDPGBatch(
            obs=obs,
            next_obs=next_obs,
            state=columns["state"][:, 0],
            next_state=columns["state"][:, 1],
            actions=columns["actions"][:, 0].float(),  # (B, n, a)
            policy_actions=policy_actions,
            next_actions=next_actions,
            rewards=rewards,
            done=columns["terminated"][:, 0],
            mask=mask,
            weights=columns["weights"],
            present=present,
            next_present=next_present,
            agent_done=torch.maximum(
                columns["terminated"][:, :1], columns["agent_terminated"][:, 0]
            ),
        )

    def _team_loss(
        self, values, twins, targets, objective, batch: DDPGBatch, mask=None
    ) -> TeamLoss:
        """``values``, ``twins``, ``targets``: ``(B, k)`` critic values, twin critic
        values (or ``None``) and TD targets (k critics, or one mixed ``Q_tot``);
        ``objective``: ``(B, k)`` the critics' values of the current actions; ``mask``
        ``(B, k)`` the rows of each column (default: every real step)."""
        mask = batch.mask[:, None].expand_as(values) if mask is None else mask
        critic_term = critic_loss_with_twin(values, twins, targets, batch, mask)
        actor_term = deterministic_policy_loss(objective, mask)
        valid = mask.bool()
        return TeamLoss(
            loss=critic_term + actor_term,
            # (B, 1, k); columns of absent agents hand no TD error
            td_errors=((targets - values) * mask).detach().unsqueeze(1),
            valid=valid.any(-1, keepdim=True),  # (B, 1)
            terms={
                "values": values,
                "twin_values": twins,
                "targets": targets,
                "objective": objective,
            },
            metrics={
                "critic_loss": critic_term.detach(),
                "actor_loss": actor_term.detach(),
                "q_mean": values.detach()[valid].mean(),
            },
        )

    def _per_critic_loss(self, values, twins, targets, objective, batch, mask) -> TeamLoss:
        """``_team_loss`` of per-critic lists of ``(B,)`` columns (twins may be empty)."""
        return self._team_loss(
            torch.stack(values, -1),
            torch.stack(twins, -1) if twins else None,
            torch.stack(targets, -1),
            torch.stack(objective, -1),
            batch,
            mask,
        )


class IDDPGLearner(DDPGLearner):
    """``iddpg``: ``Q_i(o_i, a_i)`` on each agent's own reward."""

    @override(TeamReplayLearner)
    def team_loss(self, *, module_id, agent_index, view: DDPGBatch) -> TeamLoss:
        values, twins, targets, objective = [], [], [], []
        for i in agent_index:
            critic = self.critic(i)
            o, o2 = self.agent_obs(view.obs, i), self.agent_obs(view.next_obs, i)
            taken = torch.cat([o, view.actions[:, i]], -1)
            values.append(critic.value(taken))
            if critic.twin_q:
                twins.append(critic.value(taken, twin=True))
            with torch.no_grad():
                next_q = critic.target_value(torch.cat([o2, view.next_actions[:, i]], -1))
            targets.append(
                td_targets(view.rewards[:, i], view.agent_done[:, i], next_q, self.settings.gamma)
            )
            with held_fixed(critic):
                objective.append(critic.value(torch.cat([o, view.policy_actions[:, i]], -1)))
        acted = view.acted(agent_index)
        return self._per_critic_loss(values, twins, targets, objective, view, acted)


class MADDPGLearner(DDPGLearner):
    """``maddpg``: ``Q_i(s, a_1..a_n)`` on the team reward; actor i through its own action."""

    @override(TeamReplayLearner)
    def team_loss(self, *, module_id, agent_index, view: DDPGBatch) -> TeamLoss:
        team_actions = view.actions[:, agent_index]  # (B, k, a)
        taken = torch.cat([view.state, team_actions.flatten(1)], -1)
        next_taken = torch.cat([view.next_state, view.next_actions[:, agent_index].flatten(1)], -1)
        r_team = team_sum(view.rewards, agent_index)
        values, twins, targets, objective = [], [], [], []
        for k, i in enumerate(agent_index):
            critic = self.critic(i)
            values.append(critic.value(taken))
            if critic.twin_q:
                twins.append(critic.value(taken, twin=True))
            with torch.no_grad():
                next_q = critic.target_value(next_taken)
            targets.append(td_targets(r_team, view.done, next_q, self.settings.gamma))
            joint = joint_actions_with_own(team_actions, view.policy_actions[:, agent_index], k)
            with held_fixed(critic):
                objective.append(critic.value(torch.cat([view.state, joint.flatten(1)], -1)))
        # Each critic trains, and its actor ascends, where its agent acted.
        acted = view.acted(agent_index)
        return self._per_critic_loss(values, twins, targets, objective, view, acted)


class FACMACLearner(DDPGLearner):
    """``facmac``: ``Q_tot = mixer(Q_i(o_i, a_i); s)``; actors through every current action."""

    @override(TeamReplayLearner)
    def observe_batch(self, columns: dict[str, torch.Tensor]) -> None:
        for module_id in self.teams:
            self.module[module_id].observe_states(columns["state"][:, 0])

    @override(TeamReplayLearner)
    def team_loss(self, *, module_id, agent_index, view: DDPGBatch) -> TeamLoss:
        mixer: JointQMixer = self.module[module_id]
        twin_q = self.settings.twin_q
        agent_q, twin_agent_q, next_q, twin_next_q, policy_q = [], [], [], [], []
        critics = [self.critic(i) for i in agent_index]
        for critic, i in zip(critics, agent_index, strict=True):
            o, o2 = self.agent_obs(view.obs, i), self.agent_obs(view.next_obs, i)
            taken = torch.cat([o, view.actions[:, i]], -1)
            next_taken = torch.cat([o2, view.next_actions[:, i]], -1)
            agent_q.append(critic.value(taken))
            with torch.no_grad():
                next_q.append(critic.value(next_taken, target=True))
            if twin_q:
                twin_agent_q.append(critic.value(taken, twin=True))
                with torch.no_grad():
                    twin_next_q.append(critic.value(next_taken, target=True, twin=True))

        def mixed(values, states, present=view.present[:, agent_index], **kwargs):
            # Absent agents' values enter the mixer as 0.
            values = torch.stack(values, -1) * present
            return mixer.mix(values[:, None], states[:, None], **kwargs)[:, 0]

        next_present = view.next_present[:, agent_index]

        with held_fixed(mixer, *critics):
            for critic, i in zip(critics, agent_index, strict=True):
                o = self.agent_obs(view.obs, i)
                policy_q.append(critic.value(torch.cat([o, view.policy_actions[:, i]], -1)))
            objective = mixed(policy_q, view.state)

        q_tot = mixed(agent_q, view.state)
        twin_tot = mixed(twin_agent_q, view.state, twin=True) if twin_q else None
        with torch.no_grad():
            next_tot = mixed(next_q, view.next_state, next_present, target=True)
            if twin_q:  # clipped double Q on the mixed values
                clipped = torch.minimum(
                    next_tot,
                    mixed(twin_next_q, view.next_state, next_present, target=True, twin=True),
                )
                # How far the min lowers the first target mixer's bootstrap: the twin acts.
                self.metrics.log_value(
                    key=(module_id, "twin_target_gap"), value=(next_tot - clipped).mean(), window=1
                )
                next_tot = clipped
        targets = td_targets(
            team_sum(view.rewards, agent_index), view.done, next_tot, self.settings.gamma
        )
        return self._team_loss(
            q_tot.unsqueeze(-1),
            None if twin_tot is None else twin_tot.unsqueeze(-1),
            targets.unsqueeze(-1),
            objective.unsqueeze(-1),
            view,
        )
