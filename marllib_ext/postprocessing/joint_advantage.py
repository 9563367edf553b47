"""Learner connector replacing RLlib's GAE for the centralized-critic pipeline: the
episode chunks as rollout blocks (``rollout.episode_blocks``), then the one team batch
builder (``block_batch.joint_critic_block_batch``)."""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID
from marllib_ext.postprocessing.block_batch import joint_critic_block_batch
from marllib_ext.postprocessing.block_hooks import BlockHooks
from marllib_ext.rllib_compat import plain_module
from marllib_ext.rollout.episode_blocks import blocks_of_chunks

# shared_data entry: the chunks' blocks, built once for every team's connector.
CHUNK_BLOCKS = "marllib_ext_chunk_blocks"


class JointAdvantageConnector(BlockHooks, ConnectorV2):
    """Team GAE on a joint critic, written to every agent's rows of its team.

    Held by the joint-critic learners (one per team), which call its
    ``block_builder`` on rollout blocks, or the connector itself on episode chunks
    (read as blocks once per update, ``CHUNK_BLOCKS``); the env adapter puts the global
    state in ``info["state"]``. Agents may
    act on some env steps of a chunk only (turns, arrivals, deaths): each chunk is one
    world of a rollout block (``rollout.episode_blocks``), its agents present where
    they acted.

    The batch is ``joint_critic_block_batch``'s, as a batched runner's blocks give it:
    the team reward is the sum of the agents' rewards at each env step; advantages and
    value targets come from GAE on the critic's values of the states acted on and
    after each step, are standardized over the rows where the team acted and are
    copied to every agent's rows. The critic module gets its own batch: its inputs,
    value targets and the loss mask.

    A subclass changes the batch through the ``BlockHooks`` (critic state, raw
    advantages, extra columns, per-agent terms) and ``BLOCK_BATCH_OPTIONS``.
    """

    # ``joint_critic_block_batch``'s options for this class (``block_batch_options``).
    BLOCK_BATCH_OPTIONS: dict = {}
    # The batch builder ``(blocks, *, connector, rl_module, device, metrics)`` ->
    # ``{module_id: {column: tensor}}`` (COMA's connector has its own).
    block_builder = staticmethod(joint_critic_block_batch)

    def __init__(
        self,
        input_observation_space=None,
        input_action_space=None,
        *,
        settings: Any,
        critic_module_id: str = CRITIC_MODULE_ID,
        actor_module_ids: list[str] | None = None,
    ) -> None:
        """``settings``: the algorithm's typed settings (``gamma``, ``lambda_`` here);
        ``actor_module_ids``: the actor modules of this critic's team (default: every
        actor module in the batch)."""
        super().__init__(input_observation_space, input_action_space)
        self.settings = settings
        self.actor_module_ids = None if actor_module_ids is None else set(actor_module_ids)
        self.gamma = float(settings.gamma)
        self.lambda_ = float(settings.lambda_)
        self.critic_module_id = critic_module_id

    @override(ConnectorV2)
    def __call__(
        self,
        *,
        rl_module,
        batch: dict[str, Any],
        episodes: list,
        metrics: MetricsLogger | None = None,
        shared_data: dict | None = None,
        **kwargs,
    ) -> Any:
        blocks = None if shared_data is None else shared_data.get(CHUNK_BLOCKS)
        if blocks is None:
            blocks = blocks_of_chunks(episodes)
            if shared_data is not None:
                shared_data[CHUNK_BLOCKS] = blocks
        critic = plain_module(rl_module, self.critic_module_id)
        columns = self.block_builder(
            blocks,
            connector=self,
            rl_module=rl_module,
            device=next(critic.parameters()).device,
            metrics=metrics,
        )
        batch.update(columns)
        return batch
