"""PettingZoo ParallelEnv -> RLlib MultiAgentEnv, global state, env registry.

Registering your own ParallelEnv::

    from marllib_ext.envs import register_env

    register_env(
        "my:task",
        lambda **kw: MyParallelEnv(**kw),
        team_prefix=("red_", "blue_"),
        all_agents_one_policy=False,
        env_args={"size": 8},
    )

Then use ``--env my:task`` (in a script that imports the registration; for a CLI run,
put it in a module and pass ``--import my_module``).
"""

from marllib_ext.envs.adapter import STATE_KEY, ParallelEnvAdapter
from marllib_ext.envs.handle import EnvHandle, make_env
from marllib_ext.envs.registry import (
    EnvSpec,
    PolicyMappingInfo,
    get_env_spec,
    is_gymnasium_id,
    list_envs,
    make_parallel_env,
    register_env,
)

__all__ = [
    "STATE_KEY",
    "EnvHandle",
    "EnvSpec",
    "ParallelEnvAdapter",
    "PolicyMappingInfo",
    "get_env_spec",
    "is_gymnasium_id",
    "list_envs",
    "make_env",
    "make_parallel_env",
    "register_env",
]
