"""The joint-critic advantage connector's hooks: what a subclass changes in
``block_batch.joint_critic_block_batch``, the team batch built from ``(T, B)`` arrays
(a batched runner's blocks, or episode chunks read as blocks); its builder options are
``BLOCK_BATCH_OPTIONS`` (``block_batch.block_batch_options``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from marllib_ext.postprocessing.intrinsic_signals import INTRINSIC_REWARD


class BlockHooks:
    """Defaults: MAPPO's team GAE as it is."""

    # Where the per-agent terms go: None adds them to ADVANTAGES; a column name keeps
    # them apart for a learner that trains on them separately (both forms).
    agent_terms_column: str | None = None

    def block_critic_state(self, block, team: list[int], *, after: bool) -> np.ndarray:
        """``(T, B, d)`` the critic's state input per ``(step, world)``: the state acted
        on (``after``: the state after each step); ``team``: the team's agent indices
        in ``block.agents``."""
        return block.next_states if after else block.states

    def block_reward_bonus(self, block, team: list[int]) -> np.ndarray | None:
        """``(T, B)`` added to the team reward before GAE (``None``: nothing): with
        ``intrinsic_bonus_coeff > 0``, ``beta * sum_{i in team, acted} r_int_i`` of the
        signal the env runners recorded (``INTRINSIC_REWARD``, a non-conservative
        novelty bonus)."""
        coeff = float(getattr(getattr(self, "settings", None), "intrinsic_bonus_coeff", 0.0))
        if coeff <= 0:
            return None
        bonus = np.zeros(block.alive.shape[:2])
        for i in team:
            outputs = block.outputs[block.agents[i]]
            if INTRINSIC_REWARD not in outputs:
                raise ValueError(
                    f"intrinsic_bonus_coeff is {coeff} but agent {block.agents[i]!r}'s steps "
                    "carry no recorded intrinsic reward (the env runners' NoveltyRecorder)"
                )
            bonus += np.where(block.alive[:, :, i], outputs[INTRINSIC_REWARD], 0.0)
        return coeff * bonus

    def adjust_block_advantages(
        self, teams: list, metrics: Any
    ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """``(advantages, slack)``: the raw team advantages ``(T, B)`` of each
        ``block_batch.TeamView`` before they are standardized (EFX's conservative
        advantage), and per block the ``(T, B)`` slack ``block_agent_terms`` reads
        (``None``: no slack). Returned, not kept: the hooks hold no state between calls."""
        return [team.advantages for team in teams], None

    def block_extra_columns(
        self, critic, teams: list, device, metrics: Any
    ) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
        """Per block, further ``(actor_columns, critic_columns)`` of ``(T, B)`` arrays
        after the team advantages (the cost GAE); actor columns go to every agent's
        rows, and ``combine_after_standardizing`` reads them. None here."""
        return [{} for _ in teams], [{} for _ in teams]

    def combine_after_standardizing(
        self, advantages: np.ndarray, actor_columns: dict[str, np.ndarray]
    ) -> np.ndarray:
        """The advantages the actors train on, from the standardized team advantages and
        the extra actor columns of ``block_extra_columns``; identity here."""
        return advantages

    def block_agent_terms(
        self, rl_module, teams: list, slack: list[np.ndarray] | None, metrics: Any
    ) -> dict[tuple[int, int], np.ndarray]:
        """``{(block index, agent index): (n_rows,)}`` added to that agent's rows (where it
        was alive, in ``(step, world)`` order) after the team advantage is copied there
        (EFX's exploration push, from ``slack`` of ``adjust_block_advantages``); none
        here."""
        return {}
