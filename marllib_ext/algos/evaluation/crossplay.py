"""Cross-play: a team whose agent slots are played by the policies of two checkpoints
(the zero-shot coordination protocol of Overcooked papers and ZSC-Eval).

``crossplay(A, B)`` rebuilds checkpoint A with B's modules added under
``partner__<module id>`` and the partner's slots mapped to them, restores A, then loads
B's weights into those modules on the env runner, and plays complete episodes.
``crossplay_matrix`` does it for every ordered pair of runs: the diagonal is
self-play, the rest cross-play."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marllib_ext.algos.evaluation import EvaluationResult, run_episodes
from marllib_ext.algos.policy_sharing import PolicyMappingFn
from marllib_ext.algos.restore import check_checkpoint, checkpoint_algorithm, restored_algorithm
from marllib_ext.errors import ConfigError

PARTNER_PREFIX = "partner__"


def checkpoint_mapping(path: Path) -> dict[str, str]:
    """Agent -> module id of the run a checkpoint was saved from."""
    _, config = checkpoint_algorithm(path)
    mapping = config.policy_mapping_fn
    if not isinstance(mapping, PolicyMappingFn):
        raise ConfigError(f"{str(path)!r}: cross-play needs the package's agent -> policy map")
    return dict(mapping.mapping)


def default_partner_agents(agents: Sequence[str]) -> list[str]:
    """The slots a partner plays by default: the second half of the sorted agents
    (``agent_1`` of two)."""
    ordered = sorted(agents)
    return ordered[len(ordered) // 2 :]


def _partner_modules(path: Path, agents: Sequence[str]) -> tuple[dict, dict[str, Any]]:
    """``(module specs, weights)`` of the modules that play ``agents`` in checkpoint
    ``path``, keyed by their ids there."""
    mapping = checkpoint_mapping(path)
    _, config = checkpoint_algorithm(path)
    ids = sorted({mapping[a] for a in agents})
    specs = dict(config.rl_module_spec.rl_module_specs)
    with restored_algorithm(path) as algorithm:
        weights = {mid: algorithm.env_runner.module[mid].get_state() for mid in ids}
    return {mid: specs[mid] for mid in ids}, weights


@contextlib.contextmanager
def partnered_algorithm(
    checkpoint: str | Path, partner: str | Path, partner_agents: Sequence[str] | None = None
):
    """Checkpoint ``checkpoint``'s algorithm (``restored_algorithm``) whose env runner
    plays ``partner_agents`` (default: ``default_partner_agents``) with checkpoint
    ``partner``'s policies for those agents. Both runs must have the same agents."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    path, partner_path = check_checkpoint(checkpoint, 1), check_checkpoint(partner, 1)
    own = checkpoint_mapping(path)
    theirs = checkpoint_mapping(partner_path)
    if sorted(own) != sorted(theirs):
        raise ConfigError(
            f"--partner: the runs' agents differ ({sorted(own)} against {sorted(theirs)})"
        )
    slots = list(partner_agents) if partner_agents else default_partner_agents(own)
    unknown = sorted(set(slots) - set(own))
    if unknown or len(slots) == len(own):
        raise ConfigError(
            f"--partner-agents: {unknown or slots} must be some, not all, of {sorted(own)}"
        )
    specs, weights = _partner_modules(partner_path, slots)
    mapping = {a: PARTNER_PREFIX + theirs[a] if a in slots else own[a] for a in own}

    def with_partner(config) -> None:
        modules = dict(config.rl_module_spec.rl_module_specs)
        modules.update({PARTNER_PREFIX + mid: spec for mid, spec in specs.items()})
        config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=modules))
        config.multi_agent(
            policies=set(modules), policy_mapping_fn=PolicyMappingFn(mapping),
            policies_to_train=sorted(set(own.values())),
        )  # fmt: skip

    with restored_algorithm(path, configure=with_partner) as algorithm:
        for mid, state in weights.items():  # after the restore, which syncs the learner's
            algorithm.env_runner.module[PARTNER_PREFIX + mid].set_state(state)
        yield algorithm


def crossplay(
    checkpoint: str | Path,
    partner: str | Path,
    *,
    partner_agents: Sequence[str] | None = None,
    episodes: int = 10,
    explore: bool = True,
) -> EvaluationResult:
    """``episodes`` complete episodes of ``partnered_algorithm``'s mixed team."""
    check_checkpoint(checkpoint, episodes)
    with partnered_algorithm(checkpoint, partner, partner_agents) as algorithm:
        team, agents, successes = run_episodes(algorithm.env_runner, episodes, explore)
    return EvaluationResult(team[:episodes], agents, None, successes=successes[:episodes])


@dataclass(frozen=True)
class CrossplayMatrix:
    """``returns[i, j]``: the mean team return of run ``i``'s team with run ``j``'s
    policies in the partner slots (``i == j``: self-play)."""

    labels: list[str]
    returns: np.ndarray
    partner_agents: list[str]
    episodes: int

    @property
    def self_play(self) -> float:
        return float(np.mean(np.diag(self.returns)))

    @property
    def cross_play(self) -> float:
        off = ~np.eye(len(self.labels), dtype=bool)
        return float(np.mean(self.returns[off])) if off.any() else float("nan")


def crossplay_matrix(
    checkpoints: Sequence[str | Path],
    *,
    labels: Sequence[str] | None = None,
    partner_agents: Sequence[str] | None = None,
    episodes: int = 10,
    explore: bool = True,
) -> CrossplayMatrix:
    """Every ordered pair of ``checkpoints`` played together (``crossplay``); the
    diagonal plays each run with itself."""
    from marllib_ext.algos.evaluation import evaluate

    paths = [Path(c) for c in checkpoints]
    if len(paths) < 2:
        raise ConfigError("--crossplay needs two or more runs")
    slots = list(partner_agents) if partner_agents else None
    returns = np.zeros((len(paths), len(paths)))
    for i, own in enumerate(paths):
        for j, partner in enumerate(paths):
            if i == j:
                result = evaluate(own, episodes=episodes, explore=explore)
            else:
                result = crossplay(
                    own, partner, partner_agents=slots, episodes=episodes, explore=explore
                )
            returns[i, j] = result.team_return_mean
    if slots is None:
        slots = default_partner_agents(checkpoint_mapping(paths[0]))
    names = list(labels) if labels else [p.parent.name for p in paths]
    return CrossplayMatrix(names, returns, slots, episodes)


def write_crossplay(matrix: CrossplayMatrix, out: Path) -> Path:
    """``crossplay.md`` (the matrix, self-play and cross-play means) and
    ``crossplay.png`` (the matrix as a heat map) in ``out``; returns the Markdown path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out.mkdir(parents=True, exist_ok=True)
    n = len(matrix.labels)
    header = "| team \\ partner | " + " | ".join(matrix.labels) + " |"
    lines = [
        "# Cross-play",
        "",
        f"Mean team return over {matrix.episodes} episodes of each row's team with the "
        f"column's policies playing {', '.join(matrix.partner_agents)}; the diagonal is "
        "self-play.",
        "",
        header,
        "|---" * (n + 1) + "|",
    ]
    for label, row in zip(matrix.labels, matrix.returns, strict=True):
        lines.append(f"| {label} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    lines += [
        "",
        f"Self-play mean (diagonal): {matrix.self_play:.1f}. "
        f"Cross-play mean (off the diagonal): {matrix.cross_play:.1f}.",
        "",
        "![cross-play](crossplay.png)",
        "",
    ]
    path = out / "crossplay.md"
    path.write_text("\n".join(lines))
    figure = Figure(figsize=(1.2 * n + 2, 1.2 * n + 1))
    FigureCanvasAgg(figure)
    axis = figure.add_subplot()
    # The scale starts at 0 (or below): a small gap between self- and cross-play
    # should look small.
    low, high = min(0.0, float(matrix.returns.min())), float(matrix.returns.max())
    image = axis.imshow(matrix.returns, cmap="viridis", vmin=low, vmax=max(high, low + 1e-9))
    axis.set_xticks(range(n), matrix.labels, rotation=45, ha="right")
    axis.set_yticks(range(n), matrix.labels)
    axis.set_xlabel(f"partner (plays {', '.join(matrix.partner_agents)})")
    axis.set_ylabel("team")
    for i in range(n):
        for j in range(n):
            bright = matrix.returns[i, j] - low > 0.6 * (high - low)
            axis.text(
                j, i, f"{matrix.returns[i, j]:.0f}", ha="center", va="center",
                color="k" if bright else "w",
            )  # fmt: skip
    figure.colorbar(image, ax=axis, label="team return")
    figure.tight_layout()
    figure.savefig(out / "crossplay.png", dpi=100)
    return path
