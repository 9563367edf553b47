"""marllib-ext: MARLlib-style multi-agent pipelines on Ray RLlib's new API stack."""

from marllib_ext import algos
from marllib_ext.envs import make_env, make_parallel_env, register_env
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat.episodes import (
    iterate_agents_in_sorted_order,
    keep_infos_when_slicing,
)

# Runs reproduce across processes: RLlib's agent sets iterate in sorted order, not in
# the per-process hash order (rllib_compat.episodes).
iterate_agents_in_sorted_order()
# Data-parallel learners slice episodes; the slices keep their infos (global state).
keep_infos_when_slicing()

__version__ = "0.1.0"

__all__ = ["ConfigError", "algos", "make_env", "make_parallel_env", "register_env"]
