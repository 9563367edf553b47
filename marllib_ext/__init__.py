"""marllib-ext: MARLlib-style multi-agent pipelines on Ray RLlib's new API stack."""

from marllib_ext import algos
from marllib_ext.envs import make_env, make_parallel_env, register_env
from marllib_ext.errors import ConfigError

__version__ = "0.1.0"

__all__ = ["ConfigError", "algos", "make_env", "make_parallel_env", "register_env"]
