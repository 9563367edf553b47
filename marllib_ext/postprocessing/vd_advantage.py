"""Joint-advantage connector for the value-decomposition critic (V_tot from a mixer)."""

from __future__ import annotations

from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector


class VDJointAdvantageConnector(JointAdvantageConnector):
    """Team GAE on ``V_tot``: the critic batch also holds every agent's own observation.

    ``agent_obs[row, i]`` is agent ``i``'s (the block's agent order) observation at that
    team row, zero-padded to the largest observation size -- exactly the observation its
    actor saw (EFX's budget included) -- and ``agent_present`` where it acted
    (``block_batch.critic_inputs``).
    """

    BLOCK_BATCH_OPTIONS: dict = {"agent_obs": True}
