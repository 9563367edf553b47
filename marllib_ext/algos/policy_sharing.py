"""MARLlib's policy sharing: ``all`` | ``group`` (by team prefix) | ``individual``."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym

from marllib_ext.envs.registry import PolicyMappingInfo
from marllib_ext.errors import ConfigError

SHARE_POLICY_MODES = ("all", "group", "individual")
SHARED_POLICY_ID = "shared"


def _group_name(prefix: str) -> str:
    return prefix.rstrip("_") or SHARED_POLICY_ID


def agent_to_policy(
    agents: list[str] | tuple[str, ...],
    info: PolicyMappingInfo,
    share_policy: str,
    *,
    env_name: str = "env",
) -> dict[str, str]:
    """Maps each agent id to a policy id following MARLlib's rules.

    ``all``: one policy ``shared`` (allowed when ``all_agents_one_policy``);
    ``group``: one policy per ``team_prefix`` entry, named after the prefix;
    ``individual``: one policy per agent (allowed when ``one_agent_one_policy``).
    """
    if share_policy not in SHARE_POLICY_MODES:
        raise ConfigError(f"share_policy must be one of {SHARE_POLICY_MODES}, got {share_policy!r}")
    if share_policy == "all":
        if not info.all_agents_one_policy:
            raise ConfigError(
                f"share_policy='all' is not allowed for env {env_name!r} "
                "(all_agents_one_policy is False); use 'group' or 'individual'"
            )
        return {agent: SHARED_POLICY_ID for agent in agents}
    if share_policy == "individual":
        if not info.one_agent_one_policy:
            raise ConfigError(
                f"share_policy='individual' is not allowed for env {env_name!r} "
                "(one_agent_one_policy is False); use 'group' or 'all'"
            )
        return {agent: agent for agent in agents}
    mapping = {}
    for agent in agents:
        prefix = next((p for p in info.team_prefix if agent.startswith(p)), None)
        if prefix is None:
            raise ConfigError(
                f"agent {agent!r} of env {env_name!r} matches no team_prefix "
                f"{list(info.team_prefix)}; share_policy='group' needs one"
            )
        mapping[agent] = _group_name(prefix)
    return mapping


def check_shared_spaces(
    mapping: Mapping[str, str],
    observation_spaces: Mapping[str, gym.Space],
    action_spaces: Mapping[str, gym.Space],
) -> None:
    """Agents sharing a policy must have identical observation and action spaces."""
    first_agent: dict[str, str] = {}
    for agent, policy in mapping.items():
        other = first_agent.setdefault(policy, agent)
        for kind, spaces in (("observation", observation_spaces), ("action", action_spaces)):
            if spaces[agent] != spaces[other]:
                raise ConfigError(
                    f"agents {other!r} and {agent!r} share policy {policy!r} but have "
                    f"different {kind} spaces ({spaces[other]} vs {spaces[agent]}); "
                    "choose another share_policy"
                )


class PolicyMappingFn:
    """Picklable ``policy_mapping_fn`` for RLlib built from an agent -> policy dict."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = dict(mapping)

    def __call__(self, agent_id, episode=None, **kwargs) -> str:
        return self.mapping[agent_id]


def policy_mapping(env, share_policy: str) -> dict[str, str]:
    """Agent -> policy id of ``env`` (an ``EnvHandle``) under ``share_policy``, with the
    spaces of every shared policy checked."""
    layout = env.layout
    mapping = agent_to_policy(
        layout.agents, env.spec.policy_mapping, share_policy, env_name=env.name
    )
    check_shared_spaces(mapping, layout.observation_spaces, layout.action_spaces)
    return mapping


def default_share_policy(spec, env) -> str:
    """The first of ``all``, ``group``, ``individual`` that ``env`` (an ``EnvHandle``)
    allows and that gives a sequential algorithm (``spec``, an ``AlgoSpec``: HAPPO,
    HATRPO) several policies in every team of several agents: ``all`` on one
    cooperative team, ``group`` on mixed teams."""
    if not env.is_multi_agent:
        return "all"
    for mode in SHARE_POLICY_MODES:
        try:
            mapping = policy_mapping(env, mode)
        except ConfigError:
            continue
        if spec.capabilities.sequential and any(
            len(agents) > 1 and len({mapping[agent] for agent in agents}) == 1
            for agents in env.layout.teams.values()
        ):
            continue
        return mode
    return "all"  # none fits: the builder names the reason
