"""EFX's conservative advantage on rollout blocks: ``EFXJointAdvantageConnector``'s
hooks over ``(T, B)`` team arrays (``block_hooks.BlockHooks``).

The budget each agent acted on is read back from its observation, as on chunks. A
block's team rows, taken world by world in time order (the rows where an agent of the
team acted), form the same segments as the chunks of that sample: a segment ends
where the world's episode ended or the block does."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.ops.advantages import block_gae
from marllib_ext.ops.efx import budget_capped_intrinsic, demand_push_term
from marllib_ext.postprocessing.block_hooks import BlockHooks
from marllib_ext.postprocessing.intrinsic_signals import INTRINSIC_REWARD
from marllib_ext.rllib_compat import plain_module


@dataclass
class SegmentRows:
    """One team block's rows in segment order: row ``k`` is step ``t[k]`` of world
    ``b[k]``; ``ends[k]``: the segment's last row; ``episode_ends[k]``: its episode
    ended there (not a block cut); ``starts[k]``: its episode began there."""

    t: np.ndarray
    b: np.ndarray
    ends: np.ndarray
    episode_ends: np.ndarray
    starts: np.ndarray

    @classmethod
    def of(cls, acting: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, starts):
        """From ``(T, B)`` arrays: the rows where the team acted, the world's episode
        ends and starts (``None``: none known)."""
        horizon, num_envs = acting.shape
        order = np.flatnonzero(acting.T.ravel())  # world-major
        t, b = order % horizon, order // horizon
        ended = terminated | truncated
        episode = np.concatenate([np.zeros((1, num_envs), int), np.cumsum(ended, 0)[:-1]])
        key = b * (horizon + 1) + episode[t, b]  # (world, episode within the block)
        ends = np.append(key[1:] != key[:-1], True) if len(key) else np.zeros(0, bool)
        began = np.zeros(len(t), bool) if starts is None else starts[t, b]
        return cls(t=t, b=b, ends=ends, episode_ends=ends & ended[t, b], starts=began)


def _against_its_mean(signal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(-signal, its mean on every row)``: a signal whose expectation is unknown, in
    ``demand_push_term``'s ``(logp, entropy)`` form, so the push is ``signal - mean``."""
    return -signal, np.full_like(signal, signal.mean() if signal.size else 0.0)


class EFXBlockHooks(BlockHooks):
    """The critic sees ``[state, z]``; the raw team advantages become the configured
    conservative form over each block's segments; ``demand_push`` adds its push to the
    agents' rows."""

    def block_budget(self, block, team: list[int], *, after: bool) -> np.ndarray:
        """``(T, B)`` the raw z the team's agents saw at each step (``after``: with the
        observation after the step); 0 where none of them was there."""
        observations = block.next_observations if after else block.observations
        present = (block.present_after() if after else block.alive)[:, :, team]
        z = np.zeros(present.shape[:2])
        for j, i in enumerate(team):
            agent_z = self.budget_input.read(observations[block.agents[i]])
            z = np.where(present[:, :, j], agent_z, z)
        return z

    def block_critic_state(self, block, team, *, after):
        state = super().block_critic_state(block, team, after=after)
        return self.budget_input.append(state, self.block_budget(block, team, after=after))

    def agent_intrinsic(self, block, i: int) -> np.ndarray:
        """``(T, B)`` agent ``i``'s intrinsic reward at each step it acted (garbage
        elsewhere): the column the env runner recorded (``INTRINSIC_REWARD``), or, for
        the surprisal signal, ``-c * log pi`` from the log-probs logged at sampling."""
        outputs = block.outputs[block.agents[i]]
        if INTRINSIC_REWARD in outputs:
            return np.asarray(outputs[INTRINSIC_REWARD], np.float64)
        return -self.intrinsic_coef * np.asarray(outputs[Columns.ACTION_LOGP], np.float64)

    def block_reward_bonus(self, block, team: list[int]) -> np.ndarray | None:
        """``(T, B)`` ``beta * min(delta, max(z, 0))`` where the team acted (``budget_bonus_coeff``
        ``beta``; ``None`` at 0): the team intrinsic reward paid up to the budget it still
        had to collect (``ops.efx.budget_capped_intrinsic``)."""
        coeff = self.budget_bonus_coeff
        if coeff <= 0:
            return None
        delta = self._team_intrinsic(block, team)
        z = self.block_budget(block, team, after=False)
        acted = block.alive[:, :, team].any(-1)
        return coeff * np.where(acted, budget_capped_intrinsic(delta, z), 0.0)

    def _team_intrinsic(self, block, team: list[int]) -> np.ndarray:
        """``(T, B)`` ``delta = sum_{i in team, acted} r_int_i``."""
        total = np.zeros(block.alive.shape[:2])
        for i in team:
            total += np.where(block.alive[:, :, i], self.agent_intrinsic(block, i), 0.0)
        return total

    def adjust_block_advantages(self, teams, metrics):
        segments = [
            SegmentRows.of(tb.acting, tb.block.terminated, tb.block.truncated, tb.block.starts)
            for tb in teams
        ]

        def rows(arrays):
            return np.concatenate([a[s.t, s.b] for a, s in zip(arrays, segments, strict=True)])

        a_ext = rows([tb.advantages for tb in teams])
        delta = rows([self._team_intrinsic(tb.block, tb.team) for tb in teams])
        z = rows([self.block_budget(tb.block, tb.team, after=False) for tb in teams])
        ends = np.concatenate([s.ends for s in segments])
        a_final, binding, slack = self.conservative(a_ext, delta, z, ends)
        if metrics is not None:
            starts = np.concatenate([s.starts for s in segments])
            metrics.log_dict(
                self.metrics(
                    a_ext, a_final, binding, slack, delta, z, ends=ends,
                    episode_ends=np.concatenate([s.episode_ends for s in segments]),
                    z0=z[starts],
                )
                | self.extrinsic_metrics(
                    rows([tb.rewards for tb in teams]), a_ext, a_final, binding, z
                )
                | self.budget_bonus_metrics(delta, z),
                key=self.critic_module_id,
                window=1,
            )  # fmt: skip
        out, block_slack = [], []
        offset = 0
        for tb, s in zip(teams, segments, strict=True):
            part = slice(offset, offset + len(s.t))
            offset += len(s.t)
            adjusted = tb.advantages.copy()
            adjusted[s.t, s.b] = a_final[part]
            team_slack = np.zeros(tb.acting.shape)
            team_slack[s.t, s.b] = slack[part]
            out.append(adjusted)
            block_slack.append(team_slack)
        return out, block_slack

    def agent_intrinsic_in_c(self, block, i: int) -> np.ndarray:
        """``(T, B)`` :meth:`agent_intrinsic` in units of ``c`` (as it is with ``c = 0``)."""
        scale = self.intrinsic_coef if self.intrinsic_coef > 0 else 1.0
        return self.agent_intrinsic(block, i) / scale

    def intrinsic_return_to_go(self, block, i: int) -> np.ndarray:
        """``(T, B)`` agent ``i``'s discounted intrinsic return from each step to the end
        of its segment, in units of ``c``: ``G[t] = r_int[t] / c + gamma * G[t + 1]``
        (``block_gae`` with zero values and ``lambda = 1``; no bootstrap at a cut)."""
        per_step = np.where(block.alive[:, :, i], self.agent_intrinsic_in_c(block, i), 0.0)
        zeros = np.zeros_like(per_step)
        returns, _ = block_gae(
            per_step,
            zeros,
            zeros,
            block.terminated,
            block.truncated,
            gamma=self.gamma,
            lambda_=1.0,
        )
        return returns

    def block_agent_terms(self, rl_module, teams, slack, metrics):
        """``demand_push``: ``w[t] * (-log pi_i(a|o_t) - H_i(o_t))`` on every agent row,
        from the slack of its team row: the agent's surprisal against its expectation.
        With a recorded signal (counts) the same push takes ``r_int / c`` against its
        mean over the agent's rows in the block (the expectation is unknown). With
        ``push_credit: return`` it takes the agent's discounted intrinsic return-to-go
        against its mean over those rows, so a step is credited with the novelty it leads
        to."""
        if not self.pushes:
            return {}
        terms = {}
        for k, (tb, block_slack) in enumerate(zip(teams, slack, strict=True)):
            block = tb.block
            for i in tb.team:
                agent = block.agents[i]
                rows = block.alive[:, :, i]
                outputs = block.outputs[agent]
                if self.push_credit == "return":
                    logp, expected = _against_its_mean(self.intrinsic_return_to_go(block, i)[rows])
                elif INTRINSIC_REWARD in outputs:
                    logp, expected = _against_its_mean(self.agent_intrinsic_in_c(block, i)[rows])
                else:
                    module = plain_module(rl_module, block.module_of[agent])
                    dist_inputs = torch.from_numpy(outputs[Columns.ACTION_DIST_INPUTS][rows])
                    dist = module.get_train_action_dist_cls().from_logits(dist_inputs)
                    logp = outputs[Columns.ACTION_LOGP][rows]
                    expected = dist.entropy().detach().cpu().numpy()
                terms[(k, i)] = demand_push_term(
                    block_slack[rows],
                    logp,
                    expected,
                    kappa=self.kappa,
                    z_range=self.demand_range,
                    scale=self.push_scale,
                )
        if metrics is not None:
            pairs = zip(slack, teams, strict=True)
            team_slack = np.concatenate([s[tb.acting] for s, tb in pairs])
            pushed = np.concatenate(list(terms.values()))
            metrics.log_dict(
                self.push_metrics(team_slack, pushed), key=self.critic_module_id, window=1
            )
        return terms
