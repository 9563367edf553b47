"""Pure math used by the learners and connectors. No Ray import anywhere in this package."""

from marllib_ext.ops.advantages import block_gae, own_step_gae, standardize_valid, team_gae

__all__ = ["block_gae", "own_step_gae", "standardize_valid", "team_gae"]
