"""Learner connector replacing RLlib's GAE for the centralized-critic pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from marllib_ext.envs.adapter import (
    ACTION_MASK_KEY,
    OBSERVATION_KEY,
    STATE_KEY,
)
from marllib_ext.ops.advantages import standardize_valid, team_gae
from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID, OLD_VALUES, STATE
from marllib_ext.postprocessing.block_hooks import BlockHooks
from marllib_ext.postprocessing.episode_steps import (
    agent_env_offsets,
    chunk_env_steps,
    env_step_team_rewards,
    observed_steps,
    team_chunk_infos,
)
from marllib_ext.postprocessing.team_layout import AgentRows, TeamLayout, build_team_layout
from marllib_ext.rllib_compat import plain_module

TEAM_ADVANTAGE_MEAN = "team_advantage_mean"
TEAM_VALUE_MEAN = "team_value_mean"


@dataclass
class TeamBatch:
    """Aligned team view of one training batch; arrays are ``(n_rows,)`` unless noted.

    Rows are env steps of each episode chunk followed by the chunk's bootstrap row.
    """

    layout: TeamLayout
    states: np.ndarray  # (n_rows, state_dim)
    rewards: np.ndarray  # team reward: sum over agents
    terminateds: np.ndarray  # bool, last real row of a chunk where every agent terminated
    truncateds: np.ndarray  # bool, last real row of every other chunk (bootstraps)
    valid: np.ndarray  # bool, False on bootstrap rows (the critic's loss rows)
    # bool, last real row of a chunk whose episode really ended there (terminated or
    # truncated by the env); False at sampler cuts, which `truncateds` also marks.
    episode_ends: np.ndarray
    env_steps: np.ndarray  # int, the env step of each row within its episode
    module_columns: dict[str, dict[str, np.ndarray]]  # numpy copies of actor batch columns
    # Per chunk, the lead agent's infos for its rows (index t: the info returned with the
    # observation of row t, so the info after row t's action is at t + 1).
    chunk_infos: list[list[dict]]

    @property
    def acting(self) -> np.ndarray:
        """``(n_rows,)`` valid rows where at least one agent of the team acted (the rows
        whose advantages reach an actor)."""
        return self.valid & self.layout.present.any(axis=1)


def numpy_columns(module_batch: dict[str, Any], columns: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Numpy copies of ``columns``; a masked observation ``{"observation", "action_mask"}``
    gives its plain observation under ``OBS`` and its mask under ``"action_mask"``."""
    out = {}
    for column in columns:
        value = module_batch[column]
        if isinstance(value, dict):  # masked observations
            out[ACTION_MASK_KEY] = value[ACTION_MASK_KEY].detach().cpu().numpy()
            value = value[OBSERVATION_KEY]
        out[column] = value.detach().cpu().numpy()
    return out


class JointAdvantageConnector(BlockHooks, ConnectorV2):
    """Team GAE on a joint critic, written to every agent's rows.

    Preconditions: runs last in a PPO learner pipeline (``GeneralAdvantageEstimation``
    removed), after ``AddOneTsToEpisodesAndTruncate`` and batching to tensors; the env
    adapter puts the global state in ``info["state"]``. Agents may act on some env
    steps of a chunk only (turns, arrivals, deaths): each agent's rows are placed on
    the env steps it acted at (``TeamBatch``), absent agents' slots are masked.

    Per chunk, team row ``i`` is env step ``env_t_started + i`` and the last row is the
    bootstrap row. The team reward is the sum of the agents' rewards; advantages and
    value targets come from :func:`marllib_ext.ops.team_gae` on the critic's values,
    are standardized over valid rows and are copied to every agent's rows. The critic
    module gets its own batch: ``state``, value targets and the loss mask.

    Hooks, in the order :meth:`__call__` runs them:

    1. :meth:`module_columns` and :meth:`critic_batch`: what the team batch and the
       critic's inputs hold;
    2. :meth:`adjust_before_standardizing`: raw team advantages -> final raw team
       advantages (EFX's conservative advantage); identity here;
    3. the base standardizes over valid rows (:meth:`standardized`);
    4. :meth:`extra_columns`: further actor and critic columns (cost GAE);
    5. :meth:`combine_after_standardizing`: the advantages the actors train on, from
       the standardized ones and the extra actor columns; identity here;
    6. :meth:`agent_advantage_terms`: per-agent terms added to each agent's copy of the
       team advantage (EFX's exploration push); none here.
    """

    # What ``postprocessing.block_batch.joint_critic_block_batch`` builds from a block,
    # with this class's ``BlockHooks``.
    BLOCK_BATCH_OPTIONS: dict = {}

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

    # ---- hooks ------------------------------------------------------------------
    def module_columns(self) -> tuple[str, ...]:
        """Actor batch columns copied to numpy into ``TeamBatch.module_columns``."""
        return (Columns.REWARDS, Columns.TERMINATEDS)

    def critic_batch(self, team: TeamBatch) -> dict[str, np.ndarray]:
        """Columns of the critic module's batch, one row per team row: the state here."""
        return {STATE: team.states}

    def adjust_before_standardizing(
        self, team: TeamBatch, advantages: np.ndarray, metrics: MetricsLogger | None
    ) -> np.ndarray:
        """Hook 2: final raw team advantages from the GAE ones; identity for MAPPO."""
        return advantages

    def extra_columns(
        self,
        critic,
        critic_inputs: dict[str, torch.Tensor],
        team: TeamBatch,
        metrics: MetricsLogger | None,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Hook 4: further ``(actor_columns, critic_columns)`` per team row, after the advantages.

        Actor columns are scattered to every agent's rows; none for MAPPO."""
        return {}, {}

    def combine_after_standardizing(
        self, advantages: np.ndarray, actor_columns: dict[str, np.ndarray]
    ) -> np.ndarray:
        """Hook 5: the advantages the actors train on, from the standardized team advantages and
        the extra actor columns; identity for MAPPO."""
        return advantages

    def agent_advantage_terms(
        self, rl_module, team: TeamBatch, metrics: MetricsLogger | None
    ) -> dict[str, np.ndarray]:
        """Hook 6: module id -> ``(module_rows,)`` added to that module's advantages after
        the team advantage is copied to its rows (or written to ``agent_terms_column``);
        none for MAPPO."""
        return {}

    @staticmethod
    def standardized(
        advantages: np.ndarray, team: TeamBatch, mask: np.ndarray | None = None
    ) -> np.ndarray:
        """Standardized over the rows where the team acted (every column of a
        ``(n_rows, ...)`` array, e.g. one per agent), or over ``mask`` (the array's
        shape, e.g. ``(n_rows, n_agents)`` rows where each agent acted); 0 elsewhere."""
        rows = (slice(None),) + (None,) * (advantages.ndim - 1)
        valid = np.broadcast_to(team.acting[rows] if mask is None else mask, advantages.shape)
        out = standardize_valid(advantages, valid)
        out[~valid] = 0.0
        return out

    def gae(self, rewards: np.ndarray, values: np.ndarray, team: TeamBatch):
        """Team GAE over every valid row: ``(advantages, value_targets)`` per team row
        (bootstrap rows keep advantage 0 and their value as target)."""
        valid_rows = np.flatnonzero(team.valid)
        advantages = np.zeros(team.layout.n_rows, dtype=np.float64)
        value_targets = values.copy()
        advantages[valid_rows], value_targets[valid_rows] = team_gae(
            rewards[valid_rows],
            values[valid_rows],
            values[valid_rows + 1],  # row after a real row: next step or bootstrap row
            team.terminateds[valid_rows],
            team.truncateds[valid_rows],
            gamma=self.gamma,
            lambda_=self.lambda_,
        )
        return advantages, value_targets

    # ---- pipeline ---------------------------------------------------------------
    @override(ConnectorV2)
    def __call__(
        self,
        *,
        rl_module,
        batch: dict[str, Any],
        episodes: list,
        metrics: MetricsLogger | None = None,
        **kwargs,
    ) -> Any:
        team = self.build_team_batch(batch, episodes)
        critic = plain_module(rl_module, self.critic_module_id)
        device = next(critic.parameters()).device
        critic_inputs = {
            column: torch.from_numpy(np.ascontiguousarray(array)).to(device)
            for column, array in self.critic_batch(team).items()
        }
        with torch.no_grad():
            values = critic.compute_values(critic_inputs).cpu().numpy().astype(np.float64)

        valid_rows = np.flatnonzero(team.valid)
        advantages, value_targets = self.gae(team.rewards, values, team)
        if metrics is not None:
            metrics.log_dict(
                {
                    TEAM_VALUE_MEAN: float(values[valid_rows].mean()),
                    TEAM_ADVANTAGE_MEAN: float(advantages[valid_rows].mean()),
                },
                key=self.critic_module_id,
                window=1,
            )
        advantages = self.adjust_before_standardizing(team, advantages, metrics)
        advantages = self.standardized(advantages, team)
        actor_columns, critic_columns = self.extra_columns(critic, critic_inputs, team, metrics)
        advantages = self.combine_after_standardizing(advantages, actor_columns)
        agent_terms = self.agent_advantage_terms(rl_module, team, metrics)

        for module_id in team.layout.team_row_of:
            for column, array in (
                (Columns.VALUE_TARGETS, value_targets),
                *actor_columns.items(),
            ):
                batch[module_id][column] = self._tensor(
                    team.layout.scatter(array, module_id), device
                )
            module_advantages = team.layout.scatter(advantages, module_id)
            if module_id in agent_terms and self.agent_terms_column is not None:
                batch[module_id][self.agent_terms_column] = self._tensor(
                    agent_terms[module_id], device
                )
            elif module_id in agent_terms:
                module_advantages = module_advantages + agent_terms[module_id]
            batch[module_id][Columns.ADVANTAGES] = self._tensor(module_advantages, device)
        if getattr(self.settings, "value_clip", None) is not None:
            # The critic's outputs now, for a loss clipped around them.
            old = torch.from_numpy(values)
            old = critic.normalized(old) if hasattr(critic, "normalized") else old
            critic_columns = {**critic_columns, OLD_VALUES: old.numpy()}
        batch[self.critic_module_id] = {
            **critic_inputs,
            Columns.VALUE_TARGETS: self._tensor(value_targets, device),
            Columns.LOSS_MASK: torch.from_numpy(team.valid).to(device),
            **{column: self._tensor(array, device) for column, array in critic_columns.items()},
        }
        return batch

    @staticmethod
    def team_rewards(layout, module_columns, chunk_infos) -> np.ndarray:
        """The team reward per team row: the rewards the team's agents got at that env
        step (also those earned while not observing, as on turn-taking envs); without
        the adapter's ``step_rewards``, the sum of the agents' batch rewards."""
        rewards = env_step_team_rewards(chunk_infos, layout.agent_ids, layout.chunk_lengths)
        if rewards is not None:
            return rewards
        return layout.gather_sum(
            {mid: cols[Columns.REWARDS] for mid, cols in module_columns.items()}
        )

    @staticmethod
    def _tensor(array: np.ndarray, device) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(device)

    def build_team_batch(self, batch: dict[str, Any], episodes: list) -> TeamBatch:
        """Places every agent's rows on its env steps; see ``TeamBatch``."""
        chunks = {episode.id_: episode for episode in episodes}
        agent_rows = []
        for sa_episode in self.single_agent_episode_iterator(
            episodes, agents_that_stepped_only=False
        ):
            if sa_episode.module_id not in batch or (
                self.actor_module_ids is not None
                and sa_episode.module_id not in self.actor_module_ids
            ):
                continue
            chunk = chunks[sa_episode.multi_agent_episode_id]
            agent_rows.append(
                AgentRows(
                    chunk.id_,
                    sa_episode.agent_id,
                    sa_episode.module_id,
                    len(sa_episode),
                    agent_env_offsets(chunk, sa_episode, len(sa_episode) - 1),
                    observed_at_end=not sa_episode.is_terminated
                    and observed_steps(chunk, sa_episode.agent_id)[-1][0] == chunk_env_steps(chunk),
                )
            )
        layout = build_team_layout(
            agent_rows, {cid: chunk_env_steps(chunks[cid]) for cid in chunks}
        )
        # RLlib's AddOneTsToEpisodesAndTruncate marks every chunk's single-agent
        # episodes truncated; the multi-agent episode keeps the env's own done flags.
        chunk_done = {episode.id_: bool(episode.is_done) for episode in episodes}

        module_columns = {
            module_id: numpy_columns(batch[module_id], self.module_columns())
            for module_id in layout.team_row_of
        }
        for module_id, rows in layout.team_row_of.items():
            n_rows = len(module_columns[module_id][Columns.REWARDS])
            if n_rows != len(rows):
                raise RuntimeError(
                    f"module {module_id!r} has {n_rows} batch rows but its episodes hold "
                    f"{len(rows)}; stateful (zero-padded) actors are not supported"
                )
            rewards = module_columns[module_id][Columns.REWARDS]
            if not np.isfinite(rewards).all():
                raise ValueError(
                    f"non-finite reward in the batch of module {module_id!r}: check the "
                    "env's reward for NaN/inf"
                )

        chunk_infos = [team_chunk_infos(chunks[cid], layout.agent_ids) for cid in layout.chunk_ids]
        states = []
        for infos in chunk_infos:
            try:
                states.append(np.stack([info[STATE_KEY] for info in infos]))
            except (KeyError, TypeError) as e:
                raise ValueError(
                    "the joint critic needs the global state in info['state']; build the "
                    "env through marllib_ext.envs (ParallelEnvAdapter)"
                ) from e
        # The team is terminated where every agent of the chunk has terminated (each at
        # its own last step: agents die at different times). MultiAgentEpisode's own
        # is_terminated is also True when all agents are merely truncated (ray 2.60),
        # so the per-agent TERMINATEDS columns are the reliable source.
        chunk_of_row = layout.chunk_of_rows()
        agents_done = np.zeros((len(layout.chunk_ids), len(layout.agent_ids)), dtype=bool)
        for module_id, rows in layout.team_row_of.items():
            done_rows = module_columns[module_id][Columns.TERMINATEDS].astype(bool)
            agents_done[
                chunk_of_row[rows[done_rows]], layout.agent_index_of[module_id][done_rows]
            ] = True
        team_terminated = np.array(
            [
                all(agents_done[c, layout.agent_ids.index(a)] for a in agents)
                for c, agents in enumerate(layout.chunk_agents)
            ]
        )
        terminateds = np.zeros(layout.n_rows, dtype=bool)
        last_real = layout.last_real_rows
        terminateds[last_real] = team_terminated
        truncateds = np.zeros(layout.n_rows, dtype=bool)
        truncateds[last_real] = ~team_terminated
        episode_ends = np.zeros(layout.n_rows, dtype=bool)
        episode_ends[last_real] = [chunk_done.get(cid, False) for cid in layout.chunk_ids]
        started = np.array([int(chunks[cid].env_t_started) for cid in layout.chunk_ids])
        env_steps = np.arange(layout.n_rows) - np.repeat(
            layout.chunk_starts - started, layout.chunk_lengths
        )
        return TeamBatch(
            layout=layout,
            states=np.concatenate(states).astype(np.float32),
            rewards=self.team_rewards(layout, module_columns, chunk_infos),
            terminateds=terminateds,
            truncateds=truncateds,
            valid=layout.valid_mask(),
            episode_ends=episode_ends,
            env_steps=env_steps,
            module_columns=module_columns,
            chunk_infos=chunk_infos,
        )
