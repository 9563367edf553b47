"""``marllib-ext list``: the registered algorithms, envs and env families; with
``--markdown`` the README's tables and with ``--schedules`` docs/design.md's table of
update schedules, generated from the registries."""

from __future__ import annotations

import argparse

from marllib_ext.errors import install_hint


def _share_modes(info) -> list[str]:
    modes = ["group"]
    if info.all_agents_one_policy:
        modes.insert(0, "all")
    if info.one_agent_one_policy:
        modes.append("individual")
    return modes


def env_table_markdown() -> str:
    """The README's env table, from the registry (each env built once for its agents)."""
    from marllib_ext.envs import list_envs, make_env
    from marllib_ext.envs.registry import builtin_env_names

    lines = [
        "| name | agents | teams (one joint critic each) | share_policy allowed |",
        "|------|--------|-------------------------------|----------------------|",
    ]
    specs = list_envs()
    for name in builtin_env_names():
        spec = specs[name]
        layout = make_env(name).layout
        agents = ", ".join(f"`{a}`" for a in layout.agents)
        teams = "; ".join(f"{team}: {len(agents)}" for team, agents in layout.teams.items())
        lines.append(
            f"| `{name}` | {agents} | {teams} | {', '.join(_share_modes(spec.policy_mapping))} |"
        )
    return "\n".join(lines)


def _actions(capabilities) -> str:
    kinds = [
        kind
        for kind, ok in (
            ("discrete", capabilities.discrete_actions),
            ("continuous", capabilities.continuous_actions),
        )
        if ok
    ]
    return " + ".join(kinds)


def algorithm_table_markdown() -> str:
    """The README's algorithm table, from the registry and each algorithm's YAML."""
    from marllib_ext.algos import ALGORITHMS

    lines = [
        "| name | pipeline | actions | replay | what it is |",
        "|------|----------|---------|--------|------------|",
    ]
    for name, spec in ALGORITHMS.items():
        replay = "off-policy" if spec.capabilities.off_policy else "on-policy"
        description = spec.description.replace("|", "\\|")
        lines.append(
            f"| `{name}` | {spec.pipeline} | {_actions(spec.capabilities)} | {replay} | "
            f"{description} |"
        )
    return "\n".join(lines)


def schedule_table_markdown() -> str:
    """docs/design.md's table: every on-policy algorithm's schedule, phase by phase."""
    from marllib_ext.algos import ALGORITHMS
    from marllib_ext.algos.ppo.schedule import schedule_table

    return schedule_table(
        {name: spec.schedule for name, spec in ALGORITHMS.items() if spec.schedule is not None}
    )


def sources_table() -> str:
    """Every algorithm's hyperparameter sources (``--hyperparam-source``, a benchmark
    file's ``source``): its YAML's sections; ``common`` is the base of each."""
    from marllib_ext.algos import ALGORITHMS
    from marllib_ext.configs.algo_files import known_sources

    width = max(map(len, ALGORITHMS))
    return "\n".join(
        f"{name:<{width}}  common, {', '.join(sorted(known_sources(name)))}".rstrip(", ")
        for name in ALGORITHMS
    )


def cmd_list(args: argparse.Namespace) -> int:
    from marllib_ext.algos import ALGORITHMS
    from marllib_ext.envs import list_envs
    from marllib_ext.envs.by_name import ENV_FAMILIES

    if args.schedules:
        print(schedule_table_markdown())
        return 0
    if args.sources:
        print(sources_table())
        return 0
    if args.markdown:
        print(algorithm_table_markdown())
        print()
        print(env_table_markdown())
        return 0

    print("algorithms:")
    width = max(map(len, ALGORITHMS))
    for name, spec in ALGORITHMS.items():
        print(f"  {name:<{width}} {spec.pipeline:<3} {spec.description}")
    print("envs:")
    for name, spec in list_envs().items():
        info = spec.policy_mapping
        modes = "|".join(_share_modes(info))
        print(f"  {name:<28} share_policy: {modes:<22} {info.description}")
    print("env families (give an id):")
    for family in ENV_FAMILIES:
        if not family.modules:
            needs = "no extra"
        elif family.installed:
            needs = f"extra {family.extra!r} installed" if family.extra else "installed"
        else:
            needs = "not installed: " + (family.install or install_hint(family.extra))

        print(f"  {family.pattern:<28} {family.description}; e.g. {family.example} ({needs})")
    print("  (single-agent algorithms also take any registered gymnasium id)")
    return 0
