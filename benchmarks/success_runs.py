"""Shared by the success-rate benchmarks (`smax_learning.py`, `grf_learning.py`): train
one (label, seed) to an env-step budget, evaluate the final checkpoint's success rate,
and print the table over seeds."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import ray

from marllib_ext import algos, make_env
from marllib_ext.algos.evaluation import evaluate


def run(
    env_name: str, label: str, seed: int, steps: int, episodes: int, out: Path, **settings
) -> dict:
    """Trains ``label`` on ``env_name`` for ``steps`` env steps and evaluates the
    checkpoint over ``episodes`` episodes with sampled actions (``info["success"]`` of
    each episode's last step), and greedily. ``label``: an algorithm, ``algo@source``
    for a hyperparameter source, ``+key=value`` parts for settings (``qmix@pymarl2+
    td_lambda=null``; ``+share_policy=individual`` for the run's policy sharing;
    ``+env.KEY=VALUE`` for an env argument, e.g. ``+env.action_masks=true``).
    Writes ``<out>/<id>/<label>/seed<k>.json``; a run with its JSON is read, not
    rerun."""
    env_id = env_name.partition(":")[2]
    path = out / env_id / label / f"seed{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    name, source, label_settings = parse_label(label)
    share_policy = label_settings.pop("share_policy", "all")  # a run option, not a setting
    env_args = {
        key.removeprefix("env."): label_settings.pop(key)
        for key in list(label_settings)
        if key.startswith("env.")
    }
    start = time.perf_counter()
    result = algos.get(name, source, **label_settings, **settings).fit(
        make_env(env_name, **env_args),
        share_policy=share_policy,
        stop={"timesteps_total": steps},
        local_dir=Path("runs") / env_name.replace(":", "_") / label / f"seed{seed}",
        seed=seed,
    )
    wall = time.perf_counter() - start
    evaluated = evaluate(result.checkpoint_path, episodes=episodes)
    greedy = evaluate(result.checkpoint_path, episodes=episodes, explore=False)
    row = {
        "env_steps": int(result.final["timesteps_total"]),
        "wall_s": wall,
        "train_episode_return": float(result.final["episode_return_mean"]),
        "win_rate": evaluated.success_rate,
        "eval_team_return": evaluated.team_return_mean,
        "episodes": len(evaluated.successes),
        "greedy_win_rate": greedy.success_rate,
        "greedy_team_return": greedy.team_return_mean,
        # evaluations during training (settings evaluation_interval): [env steps, mean]
        "evaluations": evaluation_series(result.progress, "eval_return_mean"),
        "evaluation_win_rates": evaluation_series(result.progress, "eval_success_rate"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1))
    return row


def evaluation_series(progress: list[dict], column: str) -> list[list]:
    """[env steps, value] of every iteration that evaluated (``column`` finite)."""
    return [
        [int(r["timesteps_total"]), float(r[column])]
        for r in progress
        if np.isfinite(r.get(column, np.nan))
    ]


def evaluation_settings(every: int | None, episodes: int) -> dict:
    """The settings of ``--eval-every``/``--eval-episodes``: greedy evaluations every
    ``every`` iterations (none when ``every`` is unset)."""
    if not every:
        return {}
    return {"evaluation_interval": every, "evaluation_duration": episodes}


def parse_label(label: str) -> tuple[str, str | None, dict]:
    """``algo[@source][+key=value...]`` -> (algorithm, source, settings); values are
    YAML scalars."""
    import yaml

    head, *assignments = label.split("+")
    name, _, source = head.partition("@")
    settings = {}
    for assignment in assignments:
        key, _, value = assignment.partition("=")
        settings[key] = yaml.safe_load(value)
    return name, source or None, settings


def print_table(rows: dict[str, list[dict]], rate: str = "win rate") -> None:
    """One markdown row per label: the success rate's mean [min, max] over seeds."""
    print(
        f"\n| team | env steps | {rate}, mean [min, max] | greedy | team return | wall s per run |"
    )
    print("|---|---|---|---|---|---|")
    for label, runs in rows.items():
        rates = [r["win_rate"] for r in runs]
        greedy = [r.get("greedy_win_rate", np.nan) for r in runs]
        print(
            f"| `{label}` ({len(runs)} seeds) | {runs[0]['env_steps']} | {np.mean(rates):.2f} "
            f"[{min(rates):.2f}, {max(rates):.2f}] | {np.mean(greedy):.2f} "
            f"[{min(greedy):.2f}, {max(greedy):.2f}] | "
            f"{np.mean([r['eval_team_return'] for r in runs]):.2f} | "
            f"{np.mean([r['wall_s'] for r in runs]):.0f} |"
        )


def print_returns(rows: dict[str, list[dict]]) -> None:
    """One markdown row per label: mean [min, max] over seeds of each return."""
    print(
        "\n| label | env steps | greedy return | sampled return | training return "
        "| wall s per run |"
    )
    print("|---|---|---|---|---|---|")

    def spread(runs, key):
        values = [r[key] for r in runs]
        return f"{np.mean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"

    for label, runs in rows.items():
        print(
            f"| `{label}` ({len(runs)} seeds) | {runs[0]['env_steps']} | "
            f"{spread(runs, 'greedy_team_return')} | {spread(runs, 'eval_team_return')} | "
            f"{spread(runs, 'train_episode_return')} | "
            f"{np.mean([r['wall_s'] for r in runs]):.0f} |"
        )


def run_seeds(
    env_name: str,
    labels,
    seeds,
    steps: int,
    episodes: int,
    out: Path,
    num_cpus: int,
    threads: int = 1,
    **settings,
) -> dict[str, list[dict]]:
    """``run`` for every (label, seed) in one Ray session, each row printed as it
    lands; label -> its rows. ``threads``: torch's in this process (``--threads``);
    ``settings``: of every run (evaluation during training, say)."""
    from marllib_ext.cli.ray_setup import set_threads

    print(set_threads(threads), flush=True)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    rows: dict[str, list[dict]] = {}
    try:
        for label in labels:
            for seed in seeds:
                row = run(env_name, label, seed, steps, episodes, out, **settings)
                rows.setdefault(label, []).append(row)
                shown = {k: v for k, v in row.items() if k != "evaluations"}
                print(f"{env_name} {label} seed {seed}: {shown}", flush=True)
    finally:
        ray.shutdown()
    return rows
