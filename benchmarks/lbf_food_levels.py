"""How many LBF players each food needs, under lbforaging 2.0's food levels (``v3``)
and 1.x's (``v1``, ``--env-arg food_levels=v1``).

    python benchmarks/lbf_food_levels.py --task Foraging-10x10-3p-3f-v3 --resets 5000

A food of level ``f`` needs the fewest players whose levels, highest first, sum to at
least ``f``. Printed: the share of foods needing 1, 2, ... players over ``--resets``
layouts (seeds 0, 1, ...).
"""

from __future__ import annotations

import argparse

import numpy as np

from marllib_ext.envs.tuple_agents import FOOD_LEVELS, make_tuple_agents_env


def players_needed(task: str, food_levels: str, resets: int) -> np.ndarray:
    """Share of foods that need ``k + 1`` players, ``k = 0 .. players - 1``."""
    env = make_tuple_agents_env("lbf", task, food_levels=food_levels)
    foraging = env.env.unwrapped
    counts = np.zeros(len(env.possible_agents))
    for seed in range(resets):
        env.reset(seed=seed)
        reach = np.cumsum(sorted((p.level for p in foraging.players), reverse=True))
        for level in foraging.field[foraging.field > 0]:
            counts[int(np.searchsorted(reach, level))] += 1
    return counts / counts.sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Foraging-10x10-3p-3f-v3")
    parser.add_argument("--resets", type=int, default=5000)
    args = parser.parse_args()
    for rule in FOOD_LEVELS:
        shares = players_needed(args.task, rule, args.resets)
        cells = ", ".join(f"{k + 1}: {share:.3f}" for k, share in enumerate(shares))
        print(f"{args.task} food_levels={rule}: share of foods by players needed {cells}")


if __name__ == "__main__":
    main()
