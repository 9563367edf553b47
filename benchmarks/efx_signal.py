"""How strong EFX's exploration demand is on a trained batch, per advantage form.

Restores an ``efx_mappo`` checkpoint, samples one training batch with the given
``efx_advantage`` form and ``efx_kappa``, and measures in the learner's advantage
connector, before the update:

- binding rows (the S term replaced ``Â_ext``): share, mean and std of the S term
  ``kappa * S / (z_high - z_low)`` and of the ``Â_ext`` it replaced, distinct values;
- unmet rows (``S < 0``; ``demand_push`` pushes there): share, mean shortfall weight
  ``w`` and the mean |push| ``w * (-log pi - H)`` over agent rows;
- the policy-gradient norm at the batch (PPO's first step, ratio 1) of the whole final
  advantage and of its parts: the S term on binding rows, the exploration push, and
  the rest (extrinsic), each as a share of the whole one's norm.

    python benchmarks/efx_signal.py --checkpoint runs/.../checkpoint --task grid:pass \
        --env-arg size=5 max_steps=125 --forms hinge demand_push
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import ray
import torch
from ray.rllib.core.columns import Columns

from marllib_ext import algos, make_env
from marllib_ext.algos.efx import EFXJointCriticLearner
from marllib_ext.ops.advantages import standardize_valid
from marllib_ext.postprocessing.efx_advantage import EFXJointAdvantageConnector
from marllib_ext.rllib_compat import plain_module

RECORDS: list[dict] = []


class MeasuringConnector(EFXJointAdvantageConnector):
    def module_columns(self):
        return (*super().module_columns(), Columns.ACTIONS)

    def adjust_before_standardizing(self, team, advantages, metrics):
        out = super().adjust_before_standardizing(team, advantages, metrics)
        valid = np.flatnonzero(team.valid)
        a_hat = standardize_valid(advantages[valid], np.ones(len(valid), bool))
        RECORDS.append(
            {"team": team, "valid": valid, "a_hat": a_hat, "raw": out[valid].copy(), "terms": {}}
        )
        return out

    def agent_advantage_terms(self, rl_module, team, metrics):
        terms = super().agent_advantage_terms(rl_module, team, metrics)
        RECORDS[-1]["terms"] = {mid: t.copy() for mid, t in terms.items()}
        return terms

    def __call__(self, *, rl_module, batch, episodes, metrics=None, **kwargs):
        out = super().__call__(
            rl_module=rl_module, batch=batch, episodes=episodes, metrics=metrics, **kwargs
        )
        RECORDS[-1].update(gradient_shares(self, rl_module, out, RECORDS[-1]))
        return out


class MeasuringLearner(EFXJointCriticLearner):
    advantage_connector_class = MeasuringConnector


def gradient_shares(connector, rl_module, batch, record) -> dict:
    """PG norms of the final advantage and of its S-term / push / extrinsic parts."""
    team, valid = record["team"], record["valid"]
    raw = np.zeros(team.layout.n_rows)
    raw[valid] = record["raw"]
    binding = np.zeros(team.layout.n_rows, bool)
    binding[valid] = ~np.isclose(record["raw"], record["a_hat"])
    std = float(np.std(raw[valid])) or 1.0  # the base connector's standardization
    s_term = np.where(binding, raw / std, 0.0)  # the S term's share of the final advantage
    parts = {"final": {}, "s_term": {}, "push": {}}
    for mid, rows in team.layout.team_row_of.items():
        final = batch[mid][Columns.ADVANTAGES].detach().cpu().numpy().astype(np.float64)
        push = record["terms"].get(mid, np.zeros(len(rows)))
        parts["final"][mid] = final
        parts["s_term"][mid] = s_term[rows]
        parts["push"][mid] = push
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
                cols = team.module_columns[mid]
                obs = torch.from_numpy(np.ascontiguousarray(cols[Columns.OBS]))
                out = module.forward_train({Columns.OBS: obs})
                dist = module.get_train_action_dist_cls().from_logits(
                    out[Columns.ACTION_DIST_INPUTS]
                )
                logp = dist.logp(torch.from_numpy(cols[Columns.ACTIONS]))
                mask = torch.from_numpy(team.valid[team.layout.team_row_of[mid]])
                weights = torch.from_numpy(values).float()
                loss = loss + (logp * weights)[mask].sum() / mask.sum()
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


def main() -> None:
    from marllib_ext.cli import parse_assignments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--task", default="mpe:simple_spread")
    parser.add_argument("--env-arg", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--forms", nargs="+", default=["hinge", "demand_push"])
    parser.add_argument("--kappa", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    env_args = parse_assignments(args.env_arg, "--env-arg")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
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
