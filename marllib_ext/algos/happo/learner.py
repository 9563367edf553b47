"""``happo`` and ``efx_happo``: Heterogeneous-Agent PPO (Kuba et al. 2022) on the MAPPO
pipeline. The central critic and team GAE are MAPPO's; the schedule
(:data:`marllib_ext.algos.ppo.schedule.HAPPO`) trains the critics, then the actors one
policy after another in an order drawn each iteration, each on PPO's clipped surrogate
with its advantage weighted by the factor ``M`` of the policies updated before it
(:mod:`marllib_ext.ops.happo`)."""

from __future__ import annotations

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override

from marllib_ext.algos.ppo.learners import JointCriticPPOLearner
from marllib_ext.algos.ppo.phased import FACTOR_MEAN
from marllib_ext.algos.ppo.schedule import HAPPO_FACTOR
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector


class TeamRowColumn:
    """Advantage-connector mixin: the batch builder writes each actor row's team-row
    index (``block_batch.TEAM_ROW``), so the learner can align one policy's ratios with
    the other policies' rows."""

    BLOCK_BATCH_OPTIONS: dict = {"team_rows": True}


class HAPPOAdvantageConnector(TeamRowColumn, JointAdvantageConnector):
    """MAPPO's team GAE plus the team-row column."""


class HAPPOLearner(JointCriticPPOLearner):
    """The actors' surrogate on ``ADVANTAGES * M`` where the phase wrote ``M``
    (``HAPPO_FACTOR``). ``M > 0``, so scaling the advantage is exactly HAPPO's
    surrogate ``min(r M A, clip(r) M A)``."""

    advantage_connector_class = HAPPOAdvantageConnector

    @override(JointCriticPPOLearner)
    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        if HAPPO_FACTOR in batch:
            factor = batch[HAPPO_FACTOR]
            self.metrics.log_value((module_id, FACTOR_MEAN), factor.mean(), window=1)
            batch = {**batch, Columns.ADVANTAGES: batch[Columns.ADVANTAGES] * factor}
        return super().actor_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
