"""marllib-ext: MARLlib-style multi-agent pipelines on Ray RLlib's new API stack."""

from marllib_ext import legacy_paths

legacy_paths.install()  # before anything unpickles a checkpoint of the flat layout

from marllib_ext import algos  # noqa: E402
from marllib_ext.envs import make_env, make_parallel_env, register_env  # noqa: E402
from marllib_ext.errors import ConfigError  # noqa: E402

__version__ = "0.1.0"

__all__ = ["ConfigError", "algos", "make_env", "make_parallel_env", "register_env"]
