"""``coma``: counterfactual multi-agent policy gradients (Foerster et al. 2018) on the CC
pipeline, with A2C's actor loss as MARLlib's COMA.

The learner-only critic ``Q(s, a_{-i}, i)`` outputs one value per action of agent i; the
actors train on ``A_i = Q(s, a)[a_i] - sum_a' pi_i(a'|o_i) Q(s, (a_{-i}, a'))``
(``ops.coma``), and the critic on TD(lambda) targets of the team reward.

The schedule (:data:`marllib_ext.algos.ppo.schedule.COMA`): the critic takes
``critic_epochs`` passes in minibatches of ``critic_minibatch_size`` rows, then the
actors A2C's one step, on the same batch (the advantages were computed from the critic
before either). With one Adam step per batch the critic
cannot follow its targets (team returns of -45..-80 on simple_spread; after 25 steps its
``Q_taken`` mean was -0.4), its action values stay noise, and the policy collapsed
below random after 120k steps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import VF_LOSS_KEY
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from marllib_ext.algos.config import Check, divisible_by_learners
from marllib_ext.algos.ppo.a2c import MAA2CSettings, a2c_actor_loss
from marllib_ext.algos.ppo.learners import JointCriticPPOLearner, masked_value_loss
from marllib_ext.ops.coma import (
    counterfactual_advantage,
    critic_inputs,
    policy_from_logits,
    team_q_fill,
)
from marllib_ext.policies.coma_critic import COMA_INPUTS, Q_VALUES
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector
from marllib_ext.rllib_compat import plain_module

COMA_ADVANTAGE_MEAN = "coma_advantage_mean"
COMA_ADVANTAGE_STD = "coma_advantage_std"
COMA_Q_TAKEN_MEAN = "coma_q_taken_mean"


@dataclass(frozen=True)
class COMASettings(MAA2CSettings):
    """``maa2c``'s settings plus the critic's own passes over each batch."""

    critic_epochs: int
    critic_minibatch_size: int | None  # rows of the critic batch (agents x env steps)

    def checks(self) -> list[Check]:
        return [
            (self.critic_epochs > 0, "critic_epochs", "must be > 0"),
            (
                self.critic_minibatch_size is None or self.critic_minibatch_size > 0,
                "critic_minibatch_size",
                "must be > 0 or null",
            ),
            *divisible_by_learners(self, "critic_minibatch_size"),
            *(
                (value is None or value is False, key, "COMA's per-action Q: not yet supported")
                for key, value in (
                    ("value_norm", self.value_norm),
                    ("huber_delta", self.huber_delta),
                    ("value_clip", self.value_clip),
                    ("feature_norm", self.feature_norm),
                )
            ),
        ]


class COMAAdvantageConnector(JointAdvantageConnector):
    """The team batch (agents aligned by env step) turned into COMA's advantages.

    Per team row t and agent i (sorted ids): the taken actions, ``pi_i`` from the logged
    action-distribution inputs, ``Q = critic(ops.coma.critic_inputs)``. Agent i's rows get
    its own counterfactual advantage, standardized over the team's valid rows of all
    agents as every other pipeline here does (the paper does not; unstandardized, the
    small Q differences between actions left the entropy bonus in charge). The critic's
    targets per agent are TD(lambda) returns of the team reward bootstrapped on
    ``Q(s_{t+1}, a_{t+1})[a_{i,t+1}]`` (``team_gae``'s value targets with ``Q_taken`` as
    the value; at a chunk's bootstrap row, whose action is artificial, the expectation
    ``sum_a' pi_i Q``).
    """

    @override(JointAdvantageConnector)
    def module_columns(self) -> tuple[str, ...]:
        return (*super().module_columns(), Columns.ACTIONS, Columns.ACTION_DIST_INPUTS)

    @override(JointAdvantageConnector)
    def __call__(self, *, rl_module, batch, episodes, metrics: MetricsLogger | None = None, **kw):
        team = self.build_team_batch(batch, episodes)
        layout = team.layout
        critic = plain_module(rl_module, self.critic_module_id)
        n_actions = int(critic.model_config["n_actions"])
        n_agents = len(layout.agent_ids)
        actions = np.zeros((layout.n_rows, n_agents), dtype=np.int64)
        logits = np.full((layout.n_rows, n_agents, n_actions), -np.inf)
        for module_id, rows in layout.team_row_of.items():
            agents = layout.agent_index_of[module_id]
            columns = team.module_columns[module_id]
            actions[rows, agents] = columns[Columns.ACTIONS]
            agent_logits = columns[Columns.ACTION_DIST_INPUTS]
            logits[rows, agents, : agent_logits.shape[-1]] = agent_logits
        policy = policy_from_logits(logits)
        present = layout.present
        inputs = critic_inputs(team.states, actions, n_actions, present)
        device = next(critic.parameters()).device
        flat_inputs = torch.from_numpy(inputs.reshape(-1, inputs.shape[-1])).to(device)
        with torch.no_grad():
            q_values = critic.q_values(flat_inputs).cpu().numpy().astype(np.float64)
        q_values = q_values.reshape(layout.n_rows, n_agents, n_actions)
        advantages, q_taken = counterfactual_advantage(q_values, policy, actions)
        # Bootstrap rows: the baseline sum_a' pi Q = q_taken - advantages. Absent
        # agents' rows: the present agents' mean (ops.coma.team_q_fill).
        values = team_q_fill(np.where(team.valid[:, None], q_taken, q_taken - advantages), present)
        targets = np.stack(
            [self.gae(team.rewards, values[:, agent], team)[1] for agent in range(n_agents)],
            axis=1,
        )
        raw_advantages = advantages
        acted = team.valid[:, None] & present
        advantages = self.standardized(raw_advantages, team, acted)
        if metrics is not None:
            metrics.log_dict(
                {
                    COMA_ADVANTAGE_MEAN: float(raw_advantages[acted].mean()),
                    COMA_ADVANTAGE_STD: float(raw_advantages[acted].std()),
                    COMA_Q_TAKEN_MEAN: float(q_taken[acted].mean()),
                },
                key=self.critic_module_id,
                window=1,
            )
        for module_id, rows in layout.team_row_of.items():
            agents = layout.agent_index_of[module_id]
            batch[module_id][Columns.ADVANTAGES] = self._tensor(advantages[rows, agents], device)
            batch[module_id][Columns.VALUE_TARGETS] = self._tensor(targets[rows, agents], device)
        batch[self.critic_module_id] = {
            COMA_INPUTS: flat_inputs,
            Columns.ACTIONS: torch.from_numpy(actions.reshape(-1)).to(device),
            Columns.VALUE_TARGETS: self._tensor(targets.reshape(-1), device),
            Columns.LOSS_MASK: torch.from_numpy(acted.reshape(-1)).to(device),
        }
        return batch


class COMALearner(JointCriticPPOLearner):
    """A2C actors on the counterfactual advantage; the critic's loss is the masked MSE
    of ``Q(s, a_{-i}, i)[a_i]`` against the TD(lambda) targets."""

    advantage_connector_class = COMAAdvantageConnector

    @override(JointCriticPPOLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        return a2c_actor_loss(self, module_id, batch, fwd_out)

    @override(JointCriticPPOLearner)
    def critic_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        q_values = fwd_out[Q_VALUES]
        q_taken = torch.gather(q_values, -1, batch[Columns.ACTIONS].long()[:, None])[:, 0]
        loss, _ = masked_value_loss(
            q_taken,
            batch[Columns.VALUE_TARGETS],
            batch[Columns.LOSS_MASK],
            clip=self.settings.vf_clip_param,
        )
        self.metrics.log_value((module_id, VF_LOSS_KEY), loss, window=1)
        return config.vf_loss_coeff * loss
