"""Soft actor-critic learners on replayed team transitions: ``masac`` and ``hasac``
(``ops/soft_ac.py`` has the equations).

Per team, one twin soft Q-critic ``Q(s, a_1..a_n)`` regresses on the soft TD target
built from the current policies' next actions and their log-probabilities; its targets
are Polyak-averaged with ``tau`` after every update.

- ``MASACLearner``: every actor ascends the critic's value of the team's current-policy
  actions (continuous: all reparameterized at once; discrete: the expectation over its
  own actions, the others' sampled) less its temperature times its log-probability, in
  the one backward pass of the critic's loss.
- ``HASACLearner``: HARL's sequential update. In a random agent order each actor takes
  its own optimizer step on the critic's value of the joint action in which the agents
  before it already act with their updated policies (their actions resampled after
  each step), the later ones with their policies before the update. The critic's target
  uses HARL's team temperature on the joint log-probability.

Temperatures (``auto_alpha``): each policy's ``log_alpha`` (and HASAC's team one) is
tuned towards its target entropy by SAC's temperature loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override

from marllib_ext.algos.ddpg.learners import critic_loss_with_twin, held_fixed
from marllib_ext.algos.team_replay.learner import TeamLoss, TeamReplayLearner
from marllib_ext.ops.masks import masked_mean
from marllib_ext.ops.soft_ac import (
    continuous_actor_loss,
    discrete_log_prob_mean,
    discrete_soft_objective,
    entropy_penalty,
    soft_td_target,
    team_actor_loss,
    temperature_loss,
)
from marllib_ext.ops.td import n_step_returns, team_sum
from marllib_ext.policies.soft_actor import SoftActorRLModule, SoftTeamCritic
from marllib_ext.rllib_compat.data_parallel import average_over_learners

ACTOR_OPTIMIZER, CRITIC_OPTIMIZER, TEMPERATURE_OPTIMIZER = "actor", "critic", "temperature"


@dataclass
class SoftBatch:
    """One replayed batch of team transitions: ``(B, n, d)`` observations now and next,
    ``(B, s)`` states, ``(B, n, k)`` taken actions (continuous, or one-hot of the
    discrete action), ``(B, n)`` rewards, presence now and next, ``(B,)`` the
    bootstrap's discount, mask and importance weights, ``(B, n, A)`` legal actions now
    and next (or ``None``). An absent agent's action is zeros. With ``n_step`` windows
    "next" is the state ``m`` steps on, ``rewards`` the window's discounted sums and
    ``discount`` ``gamma^m (1 - d)`` (``ops.td.n_step_returns``)."""

    obs: torch.Tensor
    next_obs: torch.Tensor
    state: torch.Tensor
    next_state: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    discount: torch.Tensor
    mask: torch.Tensor
    weights: torch.Tensor
    present: torch.Tensor
    next_present: torch.Tensor
    legal: torch.Tensor | None
    next_legal: torch.Tensor | None

    def acted(self, index: int) -> torch.Tensor:
        """``(B,)`` real steps where agent ``index`` acted."""
        return self.mask * self.present[:, index]


class MASACLearner(TeamReplayLearner):
    """See the module docstring."""

    @override(TeamReplayLearner)
    def build(self) -> None:
        super().build()
        self.continuous = self.actor(0).continuous
        # Every agent's action enters the critic in one width (discrete: one-hot).
        self.action_width = max(self.actor(i).action_dim for i in range(len(self.agents)))
        self.rng = np.random.default_rng(self.config.seed)
        if not self.settings.auto_alpha:
            for module_id in self.module.keys():  # noqa: SIM118 - no __iter__
                if getattr(self.module[module_id], "log_alpha", None) is not None:
                    self.module[module_id].log_alpha.requires_grad_(False)

    @override(TeamReplayLearner)
    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        module = self.module[module_id]
        settings = self.settings
        if isinstance(module, SoftActorRLModule):
            weights, name, lr = list(module.net.parameters()), ACTOR_OPTIMIZER, settings.actor_lr
        elif isinstance(module, SoftTeamCritic):
            weights, name, lr = module.q_parameters(), CRITIC_OPTIMIZER, settings.critic_lr
        else:
            return
        self.register_optimizer(
            module_id=module_id,
            optimizer_name=name,
            optimizer=torch.optim.Adam(weights, lr=lr),
            params=weights,
            lr_or_lr_schedule=lr,
        )
        if settings.auto_alpha and getattr(module, "log_alpha", None) is not None:
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=TEMPERATURE_OPTIMIZER,
                optimizer=torch.optim.Adam([module.log_alpha], lr=settings.alpha_lr),
                params=[module.log_alpha],
                lr_or_lr_schedule=settings.alpha_lr,
            )

    # ---- the agents' policies ---------------------------------------------------------
    def actor(self, index: int) -> SoftActorRLModule:
        return self.module[self.policy_of[self.agents[index]]]

    def agent_obs(self, obs: torch.Tensor, index: int) -> torch.Tensor:
        return obs[:, index, : self.obs_dim_of[self.agents[index]]]

    @staticmethod
    def critic_input(state, actions, present) -> torch.Tensor:
        """The team critic's input ``[s, a_1..a_m]``: ``state (..., s)``, ``actions
        (..., m, width)``, ``present (..., m)`` -> ``(..., s + m width)``; an absent
        agent's action enters as zeros."""
        return torch.cat([state, (actions * present[..., None]).flatten(-2)], -1)

    def target_entropy(self, index: int) -> float:
        actor = self.actor(index)
        return self.settings.target_entropy_of(actor.continuous, actor.action_dim)

    def discrete_log_probs(self, obs, legal, index: int) -> torch.Tensor:
        """``log pi_i(.|o_i) (B, A)`` over agent ``index``'s legal actions."""
        actor = self.actor(index)
        mask = None if legal is None else legal[:, index, : actor.action_dim]
        return actor.log_probs(self.agent_obs(obs, index), mask)

    def sample(self, obs, legal, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action (B, k), log pi (B,))`` of agent ``index``'s current policy; a
        discrete action comes one-hot (sampled, no gradient through it)."""
        if self.continuous:
            return self.actor(index).sample(self.agent_obs(obs, index))
        log_probs = self.discrete_log_probs(obs, legal, index)
        chosen = torch.distributions.Categorical(logits=log_probs.detach()).sample()
        one_hot = torch.nn.functional.one_hot(chosen, self.action_width).float()
        return one_hot, log_probs.gather(-1, chosen[:, None])[:, 0]

    def next_soft_penalty(self, module_id, agent_index, log_probs, present) -> torch.Tensor:
        """``sum_i alpha_i log pi_i(a'_i|o'_i)`` of the next actions, ``(B,)``:
        ``log_probs``, ``present`` ``(B, m)`` of the team's agents."""
        alphas = torch.stack([self.actor(i).alpha for i in agent_index]).detach()
        return entropy_penalty(log_probs, alphas, present)

    # ---- the batch --------------------------------------------------------------------
    @override(TeamReplayLearner)
    def rows_view(self, columns: dict[str, torch.Tensor]) -> SoftBatch:
        present = columns["present"][:, 0]
        actions = columns["actions"][:, 0]
        if self.continuous:
            actions = actions.float()
        else:
            actions = torch.nn.functional.one_hot(actions.long(), self.action_width).float()
        legal = columns.get("action_mask")
        returns, discount, steps = n_step_returns(
            columns["rewards"], columns["terminated"], columns["mask"], self.settings.gamma
        )

        def at_bootstrap(column: torch.Tensor) -> torch.Tensor:  # row m of each window
            index = steps.view(-1, *[1] * (column.dim() - 1)).expand(-1, 1, *column.shape[2:])
            return column.gather(1, index)[:, 0]

        return SoftBatch(
            obs=columns["obs"][:, 0],
            next_obs=at_bootstrap(columns["obs"]),
            state=columns["state"][:, 0],
            next_state=at_bootstrap(columns["state"]),
            actions=actions * present[..., None],
            rewards=returns,
            discount=discount,
            mask=columns["mask"][:, 0],
            weights=columns["weights"],
            present=present,
            next_present=at_bootstrap(columns["present"]),
            legal=None if legal is None else legal[:, 0],
            next_legal=None if legal is None else at_bootstrap(legal),
        )

    # ---- the team's loss --------------------------------------------------------------
    @override(TeamReplayLearner)
    def team_loss(self, *, module_id, agent_index, view: SoftBatch) -> TeamLoss:
        critic: SoftTeamCritic = self.module[module_id]
        index = list(agent_index)
        taken = self.critic_input(view.state, view.actions[:, index], view.present[:, index])
        values, twins = critic.value(taken), critic.value(taken, twin=True)
        with torch.no_grad():
            next_actions, next_log_probs = zip(
                *(self.sample(view.next_obs, view.next_legal, i) for i in index), strict=True
            )
            next_present = view.next_present[:, index]
            next_input = self.critic_input(
                view.next_state, torch.stack(next_actions, 1), next_present
            )
            penalty = self.next_soft_penalty(
                module_id, index, torch.stack(next_log_probs, 1), next_present
            )
            targets = soft_td_target(
                team_sum(view.rewards, index),
                view.discount,
                critic.value(next_input, target=True),
                critic.value(next_input, target=True, twin=True),
                penalty,
            )
        critic_term = critic_loss_with_twin(values[:, None], twins[:, None], targets[:, None], view)
        actor_term, temperature_term, metrics = self.actor_terms(module_id, critic, index, view)
        return TeamLoss(
            loss=critic_term + actor_term + temperature_term,
            td_errors=((targets - values) * view.mask).detach()[:, None, None],  # (B, 1, 1)
            valid=view.mask.bool()[:, None],
            terms={
                "values": values,
                "twin_values": twins,
                "targets": targets,
                "critic_loss": critic_term,
                "actor_loss": actor_term,
            },
            metrics={
                "critic_loss": critic_term.detach(),
                "q_mean": values.detach()[view.mask.bool()].mean(),
                "entropy_penalty": masked_mean(penalty, view.mask),
                **metrics,
            },
        )

    def actor_terms(self, module_id, critic: SoftTeamCritic, index: list[int], view: SoftBatch):
        """``(actor loss, temperature loss, metrics)`` of the team's actors, the
        critic held fixed: every agent on the team's current-policy actions at once."""
        acted = [view.acted(i) for i in index]
        with held_fixed(critic):
            if self.continuous:
                actions, log_probs = zip(
                    *(self.sample(view.obs, None, i) for i in index), strict=True
                )
                joint = torch.stack(actions, 1)
                q = critic.min_value(self.critic_input(view.state, joint, view.present[:, index]))
                alphas = torch.stack([self.actor(i).alpha for i in index]).detach()
                actor_term = team_actor_loss(
                    q, view.mask, torch.stack(log_probs, 1), alphas, torch.stack(acted, 1)
                )
                expected = list(log_probs)
            else:
                with torch.no_grad():
                    joint = [self.sample(view.obs, view.legal, i)[0] for i in index]
                actor_term, expected = 0.0, []
                for k in range(len(index)):
                    loss, mean_log_prob = self.discrete_actor_loss(critic, view, index, joint, k)
                    actor_term = actor_term + loss
                    expected.append(mean_log_prob)
        temperature = self.temperature_terms(index, expected, acted)
        return actor_term, temperature, self.temperature_metrics(index, expected, acted)

    def discrete_actor_loss(self, critic, view: SoftBatch, index, joint, k: int):
        """Agent ``index[k]``'s ``sum_a p_a (alpha log p_a - Q_a)`` with the other
        agents' actions ``joint`` (one-hot, fixed) and the critic held fixed by the
        caller; returns ``(loss, sum_a p_a log p_a (B,))``."""
        i = index[k]
        log_probs = self.discrete_log_probs(view.obs, view.legal, i)
        n_actions = log_probs.shape[-1]
        others = torch.stack(joint, 1)  # (B, m, width)
        every = others[:, None].repeat(1, n_actions, 1, 1)  # (B, A, m, width): own = a
        every[:, :, k] = torch.eye(n_actions, self.action_width, device=others.device)
        state = view.state[:, None].expand(-1, n_actions, -1)
        present = view.present[:, None, index].expand(-1, n_actions, -1)
        q = critic.min_value(self.critic_input(state, every, present))  # (B, A)
        probs = log_probs.exp()
        alpha = self.actor(i).alpha.detach()
        loss = masked_mean(discrete_soft_objective(probs, log_probs, q, alpha), view.acted(i))
        return loss, discrete_log_prob_mean(probs, log_probs)

    def temperature_terms(self, index, log_probs, acted) -> torch.Tensor:
        """Each agent's temperature loss on its policy's (expected) log-probability."""
        if not self.settings.auto_alpha:
            return torch.zeros(())
        return sum(
            temperature_loss(self.actor(i).log_alpha, lp, self.target_entropy(i), m)
            for i, lp, m in zip(index, log_probs, acted, strict=True)
        )

    def temperature_metrics(self, index, log_probs, acted) -> dict[str, torch.Tensor]:
        return {
            "alpha": torch.stack([self.actor(i).alpha.detach() for i in index]).mean(),
            "entropy": -torch.stack(
                [masked_mean(lp.detach(), m) for lp, m in zip(log_probs, acted, strict=True)]
            ).mean(),
        }


class HASACLearner(MASACLearner):
    """``hasac``: the actors step one after another in a random order each update."""

    def next_soft_penalty(self, module_id, agent_index, log_probs, present) -> torch.Tensor:
        # HARL's soft critic: one team temperature on the joint log-probability.
        alpha = self.module[module_id].log_alpha.exp().detach()
        return entropy_penalty(log_probs, alpha, present)

    @override(TorchLearner)
    def compute_gradients(self, loss_per_module, **kwargs):
        # The actors stepped inside the loss; their weights have no gradient here.
        grads = super().compute_gradients(loss_per_module, **kwargs)
        return {ref: grad for ref, grad in grads.items() if grad is not None}

    def actor_terms(self, module_id, critic: SoftTeamCritic, index: list[int], view: SoftBatch):
        with torch.no_grad():
            joint = [self.sample(view.obs, view.legal, i)[0] for i in index]
        acted = [view.acted(i) for i in index]
        expected: list[torch.Tensor | None] = [None] * len(index)
        actor_losses = []
        for k in self.rng.permutation(len(index)):
            i = index[k]
            with held_fixed(critic):
                if self.continuous:
                    action, log_prob = self.sample(view.obs, None, i)
                    actions = [*joint[:k], action, *joint[k + 1 :]]
                    together = torch.stack(actions, 1)
                    present = view.present[:, index]
                    q = critic.min_value(self.critic_input(view.state, together, present))
                    alpha = self.actor(i).alpha.detach()
                    loss = continuous_actor_loss(log_prob, q, alpha, acted[k])
                else:
                    loss, log_prob = self.discrete_actor_loss(critic, view, index, joint, k)
            self.step_actor(i, loss)
            actor_losses.append(loss.detach())
            expected[k] = log_prob
            with torch.no_grad():  # the agents after it see its updated policy
                joint[k] = self.sample(view.obs, view.legal, i)[0]
        temperature = self.temperature_terms(index, expected, acted)
        team_alpha = critic.log_alpha
        if self.settings.auto_alpha:
            joint_log_prob = sum(
                lp * view.present[:, i] for i, lp in zip(index, expected, strict=True)
            )
            entropy = sum(self.target_entropy(i) for i in index)
            temperature = temperature + temperature_loss(
                team_alpha, joint_log_prob, entropy, view.mask
            )
        metrics = self.temperature_metrics(index, expected, acted)
        metrics["team_alpha"] = team_alpha.exp().detach()
        metrics["actor_loss"] = torch.stack(actor_losses).sum()
        return torch.zeros(()), temperature, metrics

    def step_actor(self, index: int, loss: torch.Tensor) -> None:
        """One optimizer step of agent ``index``'s actor on ``loss`` (gradient clipped
        to ``grad_clip``); its temperature keeps its gradient-free weight."""
        module_id = self.policy_of[self.agents[index]]
        optimizer = self.get_optimizer(module_id, ACTOR_OPTIMIZER)
        weights = list(self.module[module_id].net.parameters())
        optimizer.zero_grad(set_to_none=True)
        grads = torch.autograd.grad(loss, weights, allow_unused=True)
        # Data-parallel learners take the same step: the mean of their shards' gradients.
        average_over_learners([grad for grad in grads if grad is not None])
        for weight, grad in zip(weights, grads, strict=True):
            weight.grad = grad
        if self.settings.grad_clip:
            torch.nn.utils.clip_grad_norm_(weights, self.settings.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
