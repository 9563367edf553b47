"""The PPO learners: the independent family's (``PPOLearner``: each module's own value
head, GAE over each agent's own steps), the joint critics' (``JointCriticPPOLearner``,
``VDPPOLearner``: one team batch from rollout blocks), and the value losses they share."""

from __future__ import annotations

import time
from typing import Any

import torch
from ray.rllib.algorithms.ppo.ppo import LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import VF_LOSS_KEY
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.torch_utils import explained_variance

from marllib_ext.algos.ppo.phased import PhasedLearner
from marllib_ext.ops.value_loss import value_loss
from marllib_ext.policies.joint_critic import ACTOR_MODULES, OLD_VALUES, is_critic_module
from marllib_ext.policies.vd_critic import AGENT_VALUE_SPREAD
from marllib_ext.postprocessing.joint_advantage import CHUNK_BLOCKS, JointAdvantageConnector
from marllib_ext.postprocessing.own_value_batch import own_value_block_batch
from marllib_ext.postprocessing.vd_advantage import VDJointAdvantageConnector
from marllib_ext.rllib_compat import (
    ObservesBatchBeforeLoss,
    plain_module,
    sum_over_learners,
)
from marllib_ext.rollout.blocks import RolloutBlock

# Detached critic outputs logged as they are.
CRITIC_DIAGNOSTICS = (AGENT_VALUE_SPREAD,)


def masked_value_loss(
    values: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``mean_{rows in mask} min((values - targets)^2, clip)`` and the explained variance
    of the targets there (bootstrap rows are masked out). ``clip`` clamps each squared
    error as RLlib's PPO does with ``vf_clip_param``; ``None`` leaves it unclamped."""
    squared = torch.square(values - targets)
    if clip is not None:
        squared = torch.clamp(squared, 0.0, clip)
    return torch.mean(squared[mask]), explained_variance(targets[mask], values[mask])


def reference_value_loss(
    values: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    *,
    old_values: torch.Tensor | None,
    settings,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The MAPPO paper's and HARL's value loss (``ops.value_loss``: ``huber_delta``,
    ``value_clip``), each row's loss clamped at ``vf_clip_param`` as RLlib's, averaged
    over the mask; and the explained variance of the targets there."""
    per_row = value_loss(
        values,
        targets,
        old_values=old_values,
        clip=settings.value_clip,
        huber_delta=settings.huber_delta,
    )
    if settings.vf_clip_param is not None:
        per_row = torch.clamp(per_row, 0.0, settings.vf_clip_param)
    return torch.mean(per_row[mask]), explained_variance(targets[mask], values[mask])


def own_value_loss(learner, module_id: str, config, batch, fwd_out) -> torch.Tensor:
    """``vf_loss_coeff`` times the value loss of a PPO module's own value head over the
    batch's loss mask (each squared error clamped at ``vf_clip_param`` as in RLlib's
    PPO); logs the value loss and its explained variance."""
    module = plain_module(learner.module, module_id)
    values = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
    mask = batch.get(Columns.LOSS_MASK)
    vf_loss, explained = masked_value_loss(
        values,
        batch[Columns.VALUE_TARGETS],
        torch.ones_like(values, dtype=torch.bool) if mask is None else mask,
        clip=config.vf_clip_param,
    )
    learner.metrics.log_dict(
        {VF_LOSS_KEY: vf_loss, LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained},
        key=module_id,
        window=1,
    )
    return config.vf_loss_coeff * vf_loss


def masked_mean(batch) -> Any:
    """Mean over the batch's loss mask (plain mean without one)."""
    if Columns.LOSS_MASK in batch:
        mask = batch[Columns.LOSS_MASK]
        count = torch.sum(mask)
        return lambda values: torch.sum(values[mask]) / count
    return torch.mean


class PPOLearner(PhasedLearner):
    """RLlib's PPO learner (``ippo``) on its schedule (``minibatch_size: null``: one
    step on the whole batch per epoch)."""

    @override(PhasedLearner)
    def block_batch(
        self, blocks: list[RolloutBlock], episodes: list | None = None
    ) -> MultiAgentBatch:
        """Per policy module, GAE over each agent's own steps from the module's own
        value head (``postprocessing.own_value_batch.own_value_block_batch``)."""
        start = time.perf_counter()
        columns = {}
        for module_id in sorted(self.module.keys()):
            module_columns = own_value_block_batch(
                blocks,
                module=plain_module(self.module, module_id),
                module_id=module_id,
                settings=self.settings,
                device=self.device,
            )
            if module_columns is not None:
                columns[module_id] = module_columns
        return self.batch_of_columns(columns, blocks, start)


class JointCriticPPOLearner(ObservesBatchBeforeLoss, PhasedLearner):
    """PPO with one learner-only joint critic module shared by all actor modules.

    The actors' own value heads are unused (``use_critic=False``); the critic module is
    trained on the team value targets with a masked MSE (``vf_loss_coeff`` times the
    mean squared error, each term clamped at ``vf_clip_param`` as in RLlib's PPO; the
    joint critics' YAML default ``null`` leaves it unclamped).

    The critic's batch has one row per env step while a shared actor's has one row
    per agent step, and RLlib's minibatch iterator cycles every module until each has
    seen ``num_epochs`` epochs: the critic then takes ``n_agents`` passes over its
    unique rows per actor epoch -- the same number of critic updates as MAPPO with a
    per-agent critic batch.
    """

    advantage_connector_class: type[JointAdvantageConnector] = JointAdvantageConnector

    @override(PPOTorchLearner)
    def build(self) -> None:
        super().build()
        # One advantage connector per joint critic (one per team); each builds its own
        # team's actor rows and its critic's batch from the rollout blocks.
        self._advantage_connectors = [
            self.advantage_connector_class(
                critic_module_id=critic_id,
                actor_module_ids=critic.model_config.get(ACTOR_MODULES),
                **self.advantage_connector_kwargs(),
            )
            for critic_id, critic in self.module.items()
            if is_critic_module(critic_id)
        ]
        # Actor module -> the joint critic of its team.
        self.critic_of_actor = {
            actor: connector.critic_module_id
            for connector in self.advantage_connectors()
            for actor in connector.actor_module_ids or ()
        }

    @override(PhasedLearner)
    def block_batch(
        self, blocks: list[RolloutBlock], episodes: list | None = None
    ) -> MultiAgentBatch:
        """Each advantage connector's batch from the blocks (its ``block_builder``: the
        team GAE of ``postprocessing.block_batch``, or COMA's). With the ``episodes``
        the blocks were read from, each connector is called as RLlib calls one, on
        those blocks (``CHUNK_BLOCKS``): the same builder."""
        start = time.perf_counter()
        columns: dict[str, Any] = {}
        for connector in self.advantage_connectors():
            if episodes is None:
                columns.update(
                    connector.block_builder(
                        blocks,
                        connector=connector,
                        rl_module=self.module,
                        device=self.device,
                        metrics=self.metrics,
                    )
                )
            else:
                columns = connector(
                    rl_module=self.module,
                    batch=columns,
                    episodes=episodes,
                    metrics=self.metrics,
                    shared_data={CHUNK_BLOCKS: blocks},
                )
        return self.batch_of_columns(columns, blocks, start)

    def advantage_connector_kwargs(self) -> dict[str, Any]:
        return {"settings": self.settings}

    def advantage_connectors(self, connector_class: type | None = None) -> list:
        """This learner's advantage connector(s) (of ``connector_class``, if given)."""
        wanted = connector_class or self.advantage_connector_class
        return [c for c in self._advantage_connectors if isinstance(c, wanted)]

    @override(ObservesBatchBeforeLoss)
    def observe(self, batch: dict[str, Any]) -> None:
        """Value normalization: each normalized critic's running moments take one step
        from this minibatch's valid targets (over every data-parallel learner's rows,
        so all learners keep the same moments), before the loss (as HARL)."""
        for module_id, columns in batch.items():
            if not is_critic_module(module_id):
                continue
            critic = plain_module(self.module, module_id)
            if getattr(critic, "value_norm_beta", None) is None:
                continue
            targets = columns[Columns.VALUE_TARGETS][columns[Columns.LOSS_MASK]].double()
            sums = sum_over_learners(
                torch.stack([targets.sum(), (targets**2).sum(), targets.new_tensor(len(targets))])
            )
            critic.update_value_norm(sums[0] / sums[2], sums[1] / sums[2])

    @override(PPOTorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        if not is_critic_module(module_id):
            return self.actor_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        return self.critic_loss(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)

    def actor_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        """An actor module's loss: RLlib's PPO clipped surrogate plus entropy bonus (the
        hook that FOCOPS- and CUP-style learners override)."""
        return super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )

    def critic_loss(self, *, module_id, config, batch, fwd_out) -> torch.Tensor:
        """The joint critic's value loss on its ``forward_train`` output (``vf_preds``
        plus detached diagnostics such as the VD critic's value spread): squared or
        Huber error, clipped around the sampled values if set, against the targets in
        the value network's space (standardized under value normalization)."""
        values = fwd_out[Columns.VF_PREDS]
        diagnostics = {k: v for k, v in fwd_out.items() if k in CRITIC_DIAGNOSTICS}
        settings = self.settings
        if settings.value_norm or settings.huber_delta is not None or settings.value_clip:
            critic = plain_module(self.module, module_id)
            targets = batch[Columns.VALUE_TARGETS]
            if hasattr(critic, "normalized"):  # the central critic; VD's is never normalized
                targets = critic.normalized(targets)
            loss, explained = reference_value_loss(
                values,
                targets,
                batch[Columns.LOSS_MASK],
                old_values=batch.get(OLD_VALUES),
                settings=settings,
            )
        else:
            loss, explained = masked_value_loss(
                values,
                batch[Columns.VALUE_TARGETS],
                batch[Columns.LOSS_MASK],
                clip=settings.vf_clip_param,
            )
        self.metrics.log_dict(
            {
                **diagnostics,
                VF_LOSS_KEY: loss,
                LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained,
            },
            key=module_id,
            window=1,
        )
        return config.vf_loss_coeff * loss


class VDPPOLearner(JointCriticPPOLearner):
    """PPO with team GAE on ``V_tot`` from the value-decomposition critic."""

    advantage_connector_class = VDJointAdvantageConnector
