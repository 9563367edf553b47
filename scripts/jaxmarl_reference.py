"""JaxMARL's own feed-forward IPPO on Overcooked, run here: the reference curve for the
package's `overcooked` source at equal env steps.

JaxMARL publishes its Overcooked results as plots, so the reference is its code run on
this machine: ``make_train`` of ``baselines/IPPO/ippo_ff_overcooked.py`` from a JaxMARL
checkout (FLAIROx/JaxMARL), on the installed ``jaxmarl`` package's env, with the
settings of ``baselines/IPPO/config/ippo_ff_overcooked.yaml`` (16 envs x 128 steps, 4
epochs of 4 minibatches, lr 2.5e-4, the shaped reward annealed over 2.5M env steps)
and the seeds vmapped as its ``main`` does. Two changes, both options of that file:
``TOTAL_TIMESTEPS`` is the package's budget, and ``--anneal-lr`` is off by default
because the `overcooked` source keeps the learning rate constant (with it on, the
decay would end at the shorter budget rather than at the config's 5M).

Stand-ins let the file run where its extras do not: ``distrax.Categorical`` (whose TFP
substrate does not import under this machine's jax) is replaced by the same
distribution written in jax below, wandb runs disabled, and its per-update logging
callback is dropped (it stalls the vmapped scan on CPU; the returned metrics hold the
same values). The record is JaxMARL's
``returned_episode_returns`` (LogWrapper: each env's last finished episode of the env's
own reward, without the shaping, sampled actions), averaged over the envs and steps of
an update, per cook.

With the `smax` extra and ``pip install hydra-core omegaconf`` (the file imports both)::

    python scripts/jaxmarl_reference.py --jaxmarl JAXMARL_CHECKOUT \\
        --layout cramped_room --seeds 3 --steps 1000000 \\
        --out benchmarks/results/jaxmarl_reference

writes ``<out>/overcooked-<layout>/ippo_ff/seed<k>.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

SCRIPT = Path("baselines/IPPO/ippo_ff_overcooked.py")
CONFIG = Path("baselines/IPPO/config/ippo_ff_overcooked.yaml")
# The package's evaluation steps on Overcooked (every 50 iterations of 2,048 env steps).
CURVE_STEPS = (102_400, 307_200, 512_000, 716_800, 921_600)


def categorical_distribution():
    """A ``distrax``-shaped module holding ``Categorical(logits)`` with the three
    methods the IPPO file calls: ``sample(seed)``, ``log_prob(a)``, ``entropy()``."""
    import jax
    import jax.numpy as jnp

    class Categorical:
        def __init__(self, logits):
            self.log_probs = jax.nn.log_softmax(logits, axis=-1)

        def sample(self, seed):
            return jax.random.categorical(seed, self.log_probs, axis=-1)

        def log_prob(self, value):
            index = jnp.asarray(value, jnp.int32)[..., None]
            return jnp.take_along_axis(self.log_probs, index, axis=-1)[..., 0]

        def entropy(self):
            return -(jnp.exp(self.log_probs) * self.log_probs).sum(-1)

    return types.SimpleNamespace(Categorical=Categorical)


def load_ippo(checkout: Path):
    sys.modules.setdefault("distrax", categorical_distribution())
    spec = importlib.util.spec_from_file_location("ippo_ff_overcooked", checkout / SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jaxmarl", type=Path, required=True, help="a JaxMARL checkout")
    parser.add_argument("--layout", default="cramped_room")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=float, default=1e6)
    parser.add_argument("--anneal-lr", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import jax
    import numpy as np
    import wandb
    from jaxmarl.environments.overcooked import overcooked_layouts
    from omegaconf import OmegaConf  # reads the config's 2.5e6 as hydra does, a float

    wandb.init(mode="disabled")
    # The per-update wandb.log goes through jax.debug.callback, which stalls the vmapped
    # scan on this CPU; the record is read from the returned metrics instead.
    jax.debug.callback = lambda *args, **kwargs: None
    ippo = load_ippo(args.jaxmarl)
    config = OmegaConf.to_container(OmegaConf.load(args.jaxmarl / CONFIG))
    config["TOTAL_TIMESTEPS"] = args.steps
    config["ANNEAL_LR"] = bool(args.anneal_lr)
    config["ENV_KWARGS"]["layout"] = overcooked_layouts[args.layout]
    train = jax.jit(jax.vmap(ippo.make_train(config)))
    out = train(jax.random.split(jax.random.PRNGKey(config["SEED"]), args.seeds))
    returns = np.asarray(out["metrics"]["returned_episode_returns"])  # (seeds, updates)
    env_steps = np.asarray(out["metrics"]["env_step"])[0]
    commit = subprocess.run(
        ["git", "-C", str(args.jaxmarl), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    folder = (
        args.out
        / f"overcooked-{args.layout}"
        / ("ippo_ff_anneal_lr" if args.anneal_lr else "ippo_ff")
    )
    folder.mkdir(parents=True, exist_ok=True)
    for seed, curve in enumerate(returns):
        at = {
            str(s): float(curve[np.searchsorted(env_steps, s)])
            for s in CURVE_STEPS
            if s <= env_steps[-1]
        }
        record = {
            "layout": args.layout,
            "jaxmarl_commit": commit,
            "env_steps": int(env_steps[-1]),
            "return_per_cook": float(curve[-1]),
            "return_per_cook_at": at,
            "settings": {k: v for k, v in config.items() if k != "ENV_KWARGS"},
        }
        (folder / f"seed{seed}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"{args.layout} seed {seed}: {curve[-1]:.1f} per cook at {int(env_steps[-1]):,}")


if __name__ == "__main__":
    main()
