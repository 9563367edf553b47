"""``happo`` and ``efx_happo``: Heterogeneous-Agent PPO (Kuba et al. 2022) on the MAPPO
pipeline. The central critic and team GAE are MAPPO's; the actors are updated one policy
after another in a random order each iteration, each on PPO's clipped surrogate with
its advantage weighted by the factor ``M`` of the policies updated before it
(:mod:`marllib_ext.ops.happo`)."""

from __future__ import annotations

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import SampleBatch
from ray.rllib.utils.annotations import override

from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.ops.happo import team_row_log_ratio
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector
from marllib_ext.rllib_compat import first_learners_array, learner_batch, plain_module

# Actor batch columns: each row's env-step index in its team batch, and the row's M.
TEAM_ROW = "happo_team_row"
HAPPO_FACTOR = "happo_factor"
FACTOR_MEAN = "happo_factor_mean"


class TeamRowColumn:
    """Advantage-connector mixin: writes each actor row's team-row index (``TEAM_ROW``),
    so the learner can align one policy's ratios with the other policies' rows."""

    def extra_columns(self, critic, critic_inputs, team, metrics):
        actor_columns, critic_columns = super().extra_columns(critic, critic_inputs, team, metrics)
        rows = np.arange(team.layout.n_rows, dtype=np.float64)
        return {**actor_columns, TEAM_ROW: rows}, critic_columns


class HAPPOAdvantageConnector(TeamRowColumn, JointAdvantageConnector):
    """MAPPO's team GAE plus the team-row column."""


class HAPPOLearner(JointCriticPPOLearner):
    """Sequential policy updates.

    Each ``update``: the learner connector builds the batch once; the joint critic(s)
    take their PPO epochs on it; then, in an order drawn afresh each iteration, each
    actor policy takes its PPO epochs on its own rows with ``ADVANTAGES * M``, ``M``
    being, per env step, the product of ``pi_new / pi_old`` of the policies of its team
    already updated in this iteration (a group policy's ratio at a step is the product
    over its agents). ``M > 0``, so scaling the advantage is exactly HAPPO's surrogate
    ``min(r M A, clip(r) M A)``.
    """

    advantage_connector_class = HAPPOAdvantageConnector

    @override(JointCriticPPOLearner)
    def build(self) -> None:
        super().build()
        self._order_rng = np.random.default_rng(self.config.seed)
        self.last_order: list[str] = []

    @override(PPOTorchLearner)
    def update(self, *args, training_data=None, timesteps=None, **kwargs):
        batch = learner_batch(self, training_data)
        critics = sorted(m for m in batch.policy_batches if is_critic_module(m))
        actors = sorted(m for m in batch.policy_batches if not is_critic_module(m))
        self.draw_order(actors)
        log_factors = {c: np.zeros(len(batch.policy_batches[c])) for c in critics}
        env_steps = batch.env_steps()
        result = self.update_modules(
            {c: batch.policy_batches[c] for c in critics},
            env_steps,
            timesteps,
            kwargs,
            last=not actors,
        )
        for index, module_id in enumerate(self.last_order):
            module_batch = dict(batch.policy_batches[module_id])
            module_batch[HAPPO_FACTOR] = self.factor_of(module_id, module_batch, log_factors)
            result = self.update_modules(
                {module_id: SampleBatch(module_batch)},
                env_steps,
                timesteps,
                kwargs,
                last=index == len(self.last_order) - 1,
            )
            self.record_update(module_id, module_batch, log_factors)
        return result

    def draw_order(self, actors: list[str]) -> list[str]:
        """A fresh random order of ``actors`` (the same on every data-parallel learner),
        kept in ``last_order``."""
        order = first_learners_array(self._order_rng.permutation(len(actors)))
        self.last_order = [str(actors[i]) for i in order]
        return self.last_order

    def factor_of(self, module_id: str, module_batch: dict, log_factors: dict) -> torch.Tensor:
        """``(n_rows,)`` the factor ``M`` of each of the module's rows: ``exp`` of its
        team's summed log ratios (``log_factors[critic]``, per team row) so far."""
        team_rows = module_batch[TEAM_ROW].long().cpu().numpy()
        return torch.as_tensor(
            np.exp(log_factors[self.critic_of_actor[module_id]][team_rows]),
            dtype=torch.float32,
            device=module_batch[TEAM_ROW].device,
        )

    def record_update(self, module_id: str, module_batch: dict, log_factors: dict) -> None:
        """Adds the module's log ratios after its update to its team's ``log_factors``."""
        critic = self.critic_of_actor[module_id]
        log_factors[critic] += team_row_log_ratio(
            self.log_ratio(module_id, module_batch),
            module_batch[TEAM_ROW].long().cpu().numpy(),
            len(log_factors[critic]),
        )

    def log_ratio(self, module_id: str, module_batch: dict) -> np.ndarray:
        """``(n_rows,)`` ``log pi_new - log pi_old`` of the taken actions after this
        policy's update (0 on rows outside the loss mask)."""
        module = plain_module(self.module, module_id)
        with torch.no_grad():
            out = module.forward_train(dict(module_batch))
            dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
            log_ratio = dist.logp(module_batch[Columns.ACTIONS]) - module_batch[Columns.ACTION_LOGP]
        if Columns.LOSS_MASK in module_batch:
            log_ratio = torch.where(module_batch[Columns.LOSS_MASK], log_ratio, 0.0)
        return log_ratio.double().cpu().numpy()

    @override(JointCriticPPOLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        if HAPPO_FACTOR in batch:
            factor = batch[HAPPO_FACTOR]
            self.metrics.log_value((module_id, FACTOR_MEAN), factor.mean(), window=1)
            batch = {**batch, Columns.ADVANTAGES: batch[Columns.ADVANTAGES] * factor}
        return super().actor_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
