"""How strong EFX's exploration demand is on a trained batch, per advantage form.

Restores an ``efx_mappo`` checkpoint, samples one training batch with the given
``efx_advantage`` form and ``efx_kappa``, and measures in the advantage connector's
hooks on the team arrays (rollout blocks, or episode chunks read as blocks), before
the update:

- binding rows (the S term replaced ``Â_ext``): share, mean and std of the S term
  ``kappa * S / (z_high - z_low)`` and of the ``Â_ext`` it replaced, distinct values;
- unmet rows (``S < 0``; ``demand_push`` pushes there): share, mean shortfall weight
  ``w`` and the mean |push| ``w * (-log pi - H)`` over agent rows;
- the policy-gradient norm at the batch (PPO's first step, ratio 1) of the whole final
  advantage and of its parts: the S term on binding rows, the exploration push, and
  the rest (extrinsic), each as a share of the whole one's norm.

    python benchmarks/efx_signal.py --checkpoint runs/.../checkpoint --task grid:pass \
        --env-arg size=5 max_steps=125 --forms hinge demand_push

With ``--runs`` it reads the same demand over training instead, from the TensorBoard
scalars of an experiment's stored runs (``marllib-ext benchmark`` writes them under
``runs/<task>/<label>/seed_k/tb``). For every run: the training episodes that reached
the goal (each iteration's ``episode_success_mean`` times its episodes, summed) and the
first iteration with one, the policy's entropy, and for EFX runs, in the first and the
last quarter of training, the share of rows short of their budget, the share where the
cap binds, the push weight and its term's size, the intrinsic return of episodes
started at ``z_low`` and at ``z_high`` (how far the knob moves behaviour) and the
deployment budget. One Markdown table per experiment:

    python benchmarks/efx_signal.py --runs benchmarks/results/efx_secret_room*
"""

from __future__ import annotations

import warnings
from pathlib import Path

import common
import numpy as np
import ray
import torch
from critic_fit import scalars
from ray.rllib.core.columns import Columns

from marllib_ext import algos, make_env
from marllib_ext.algos.efx import EFXJointCriticLearner
from marllib_ext.ops.advantages import standardize_valid
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.rllib_compat import plain_module

RECORDS: list[dict] = []


class MeasuringConnector(EFXJointAdvantageConnector):
    def adjust_block_advantages(self, teams, metrics):
        out = super().adjust_block_advantages(teams, metrics)
        a_ext = np.concatenate([t.advantages[t.acting] for t in teams])
        RECORDS.append(
            {
                "teams": teams,
                "a_hat": standardize_valid(a_ext, np.ones(len(a_ext), bool)),
                "raw": np.concatenate([o[t.acting] for o, t in zip(out, teams, strict=True)]),
                "raw_blocks": out,
                "terms": {},
            }
        )
        return out

    def block_agent_terms(self, rl_module, teams, metrics):
        terms = super().block_agent_terms(rl_module, teams, metrics)
        RECORDS[-1]["terms"] = {key: t.copy() for key, t in terms.items()}
        RECORDS[-1].update(gradient_shares(rl_module, RECORDS[-1]))
        return terms


class MeasuringLearner(EFXJointCriticLearner):
    advantage_connector_class = MeasuringConnector


def gradient_shares(rl_module, record) -> dict:
    """PG norms of the final advantage and of its S-term / push / extrinsic parts, from
    every agent row of the recorded blocks (``ops.advantages.standardize_valid`` over
    the team's acting rows is the final advantage's standardization)."""
    teams = record["teams"]
    acting = np.concatenate([t.acting.ravel() for t in teams])
    raw = np.concatenate([r.ravel() for r in record["raw_blocks"]])
    mean, std = raw[acting].mean(), float(np.std(raw[acting])) or 1.0
    binding_rows = np.zeros(raw.shape, bool)
    binding_rows[np.flatnonzero(acting)] = ~np.isclose(record["raw"], record["a_hat"])
    splits = np.cumsum([t.acting.size for t in teams])[:-1]
    standardized = np.split(np.where(acting, (raw - mean) / std, 0.0), splits)
    s_terms = np.split(np.where(binding_rows, raw / std, 0.0), splits)
    parts = {"final": {}, "s_term": {}, "push": {}}
    inputs: dict[str, list] = {}
    for k, team in enumerate(teams):
        block = team.block
        shape = team.acting.shape
        for i in team.team:
            agent = block.agents[i]
            mid = block.module_of[agent]
            rows = block.alive[:, :, i]
            push = record["terms"].get((k, i), np.zeros(int(rows.sum())))
            parts["final"].setdefault(mid, []).append(standardized[k].reshape(shape)[rows] + push)
            parts["s_term"].setdefault(mid, []).append(s_terms[k].reshape(shape)[rows])
            parts["push"].setdefault(mid, []).append(push)
            inputs.setdefault(mid, []).append(
                (block.observations[agent][rows], block.actions[agent][rows])
            )
    parts = {name: {m: np.concatenate(v) for m, v in p.items()} for name, p in parts.items()}
    parts["extrinsic"] = {
        mid: parts["final"][mid] - parts["s_term"][mid] - parts["push"][mid]
        for mid in parts["final"]
    }
    norms = {}
    with torch.enable_grad():
        for name, per_module in parts.items():
            params, loss = [], 0.0
            for mid, values in per_module.items():
                module = plain_module(rl_module, mid)
                obs = torch.from_numpy(np.concatenate([o for o, _ in inputs[mid]]))
                actions = torch.from_numpy(np.concatenate([a for _, a in inputs[mid]]))
                out = module.forward_train({Columns.OBS: obs})
                dist = module.get_train_action_dist_cls().from_logits(
                    out[Columns.ACTION_DIST_INPUTS]
                )
                weights = torch.from_numpy(values).float()
                loss = loss + (dist.logp(actions) * weights).mean()
                params += [p for p in module.parameters() if p.requires_grad]
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            norms[name] = float(
                torch.sqrt(sum((g**2).sum() for g in grads if g is not None)).item()
            )
    return {f"pg_norm_{k}": v for k, v in norms.items()}


def measure(task, env_args, checkpoint, form, kappa, seed) -> dict:
    config = (
        algos.efx_mappo(num_env_runners=0, efx_advantage=form, efx_kappa=kappa)
        .rllib_config(make_env(task, **env_args), seed=seed)
        .learners(learner_class=MeasuringLearner)
    )
    algorithm = config.build_algo()
    try:
        algorithm.restore_from_path(str(Path(checkpoint).resolve()))
        RECORDS.clear()
        algorithm.train()
    finally:
        algorithm.stop()
    a_hat = np.concatenate([r["a_hat"] for r in RECORDS])
    raw = np.concatenate([r["raw"] for r in RECORDS])
    binding = ~np.isclose(raw, a_hat)
    pushes = np.concatenate(
        [np.concatenate(list(r["terms"].values())) for r in RECORDS if r["terms"]] or [np.zeros(1)]
    )
    result = {
        "binding_share": float(binding.mean()),
        "s_term": (float(raw[binding].mean()), float(raw[binding].std()))
        if binding.any()
        else (np.nan, np.nan),
        "s_term_range": (float(raw[binding].min()), float(raw[binding].max()))
        if binding.any()
        else (np.nan, np.nan),
        "distinct_s": int(np.unique(np.round(raw[binding], 6)).size),
        "a_hat_replaced": (float(a_hat[binding].mean()), float(a_hat[binding].std()))
        if binding.any()
        else (np.nan, np.nan),
        "push_abs_mean": float(np.abs(pushes).mean()),
        "push_nonzero_share": float((pushes != 0).mean()),
    }
    for key in ("pg_norm_final", "pg_norm_s_term", "pg_norm_push", "pg_norm_extrinsic"):
        result[key] = float(np.mean([r[key] for r in RECORDS]))
    return result


EFX_TAGS = {
    "unmet": "learners/joint_critic/efx_unmet_row_fraction",
    "binding": "learners/joint_critic/efx_binding_fraction",
    "weight": "learners/joint_critic/efx_push_weight_mean",
    "|push|": "learners/joint_critic/efx_push_term_abs_mean",
    # Any reward bonus (intrinsic_bonus_coeff or budget_bonus_coeff): its mean per team
    # row, and its share of the team reward's magnitude.
    "bonus": "learners/joint_critic/reward_bonus_mean",
    "bonus cut": "learners/joint_critic/efx_budget_bonus_cut_fraction",
    "bonus share": "learners/joint_critic/reward_bonus_share",
    "J_int(z_low)": "efx/intrinsic_return_at_z_low",
    "J_int(z_high)": "efx/intrinsic_return_at_z_high",
    "z deploy": "efx/budget_z",
}


def quarters(values: list[float]) -> str:
    """``first-quarter mean -> last-quarter mean`` of a scalar's series."""
    series = np.asarray(values, dtype=float)
    if series.size == 0:
        return "-"
    q = max(1, series.size // 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        first, last = np.nanmean(series[:q]), np.nanmean(series[-q:])
    return f"{first:.3g} -> {last:.3g}"


def run_over_training(run: Path) -> dict[str, str]:
    """One stored run's demand over training (its events file's scalars)."""
    events = sorted(run.glob("tb/events.out.tfevents.*"))
    if not events:
        return {}
    s = scalars(events[-1])
    success = np.nan_to_num(np.asarray(s.get("env_runners/episode_success_mean", [])))
    episodes = np.asarray(s.get("env_runners/num_episodes", []))[: success.size]
    found = success[: episodes.size] * episodes
    hits = np.flatnonzero(found > 0)
    row = {
        "goal reached (train)": f"{found.sum():.0f}",
        "first at iter": str(int(hits[0]) + 1) if hits.size else "-",
        "entropy": quarters(s.get("learners/shared/entropy", [])),
    }
    for name, tag in EFX_TAGS.items():
        if tag in s:
            row[name] = quarters(s[tag])
    return row


def print_over_training(experiments: list[Path]) -> None:
    for root in experiments:
        rows = []
        for run in sorted(root.glob("runs/*/*/seed_*")):
            figures = run_over_training(run)
            if figures:
                rows.append((f"{run.parent.name} {run.name}", figures))
        if not rows:
            print(f"\n{root}: no run with TensorBoard scalars (git keeps no tb/)")
            continue
        columns = list(dict.fromkeys(k for _, figures in rows for k in figures))
        print(f"\n## {root.name}\n")
        print("| run | " + " | ".join(columns) + " |")
        print("|---" * (len(columns) + 1) + "|")
        for name, figures in rows:
            print(f"| {name} | " + " | ".join(figures.get(c, "") for c in columns) + " |")


def main() -> None:
    from marllib_ext.cli import parse_assignments

    parser = common.parser(__doc__)
    parser.add_argument("--runs", nargs="+", type=Path, help="experiment folders: over training")
    parser.add_argument("--checkpoint")
    parser.add_argument("--task", default="mpe:simple_spread")
    parser.add_argument("--env-arg", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--forms", nargs="+", default=["hinge", "demand_push"])
    parser.add_argument("--kappa", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.runs:
        print_over_training(args.runs)
        return
    if not args.checkpoint:
        parser.error("--checkpoint (one batch) or --runs (over training) is required")
    env_args = parse_assignments(args.env_arg, "--env-arg")
    common.start_ray(num_cpus=2)
    results = {
        form: measure(args.task, env_args, args.checkpoint, form, args.kappa, args.seed)
        for form in args.forms
    }
    ray.shutdown()
    print(f"{args.task} {env_args}, one batch from {args.checkpoint}, kappa {args.kappa}")
    for form, r in results.items():
        total = r["pg_norm_final"]
        print(
            f"{form:<12} binding rows {r['binding_share']:.3f}: S term mean {r['s_term'][0]:+.3f} "
            f"std {r['s_term'][1]:.3f} [{r['s_term_range'][0]:+.3f}, {r['s_term_range'][1]:+.3f}], "
            f"{r['distinct_s']} distinct; Â_ext replaced mean {r['a_hat_replaced'][0]:+.3f} "
            f"std {r['a_hat_replaced'][1]:.3f}"
        )
        print(
            f"{'':<12} pushed agent rows {r['push_nonzero_share']:.3f}, mean |push| "
            f"{r['push_abs_mean']:.3f}; PG norm shares of the whole: S term "
            f"{r['pg_norm_s_term'] / total:.3f}, push {r['pg_norm_push'] / total:.3f}, "
            f"extrinsic {r['pg_norm_extrinsic'] / total:.3f}"
        )


if __name__ == "__main__":
    main()
