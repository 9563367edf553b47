"""Sampling speed of JaxMARL's envs (SMAX by default): the batched rollout over one
simulator per env runner (a jitted `jax.vmap` of every world) against the raw JaxMARL env
at the same batch, against RLlib's per-world path over the same simulator and against
RLlib's own vector env of N one-world simulators, all measured in one run.

Sampling only: a `mappo` env runner in the driver samples with its policy, handing over
rollout blocks (its learner's data) or, as for a learner that reads episodes, episode
chunks; env steps count every world's step. The raw env steps the vmapped worlds with
random (legal) actions (no policy), auto-resetting ended worlds in the same jitted call.

    python benchmarks/smax_throughput.py --scenario 3m --num-envs 8 64 --steps 8000
    python benchmarks/smax_throughput.py --env jaxmarl:overcooked:cramped_room --num-envs 64
"""

from __future__ import annotations

import time
import warnings

import common
import ray
import torch
from vmas_throughput import sampling_steps_per_second


def raw_jaxmarl_env(name: str):
    """The JaxMARL env behind the package's env ``name`` (``smax:<map>`` or
    ``jaxmarl:<env>[:<layout>]``), with its default arguments."""
    from marllib_ext.envs.by_name import spec_by_name

    return spec_by_name(name).make_batched(1).env


def raw_steps_per_second(name: str, num_envs: int, steps: int, seed: int = 0) -> float:
    """JaxMARL's own batched step: ``jax.vmap`` of the env's ``step`` (which
    auto-resets), random legal actions drawn in the same jitted call."""
    import jax
    import jax.numpy as jnp

    from marllib_ext.envs.jaxmarl import has_own_avail_actions

    env = raw_jaxmarl_env(name)
    masked = has_own_avail_actions(env)
    n_actions = {a: env.action_space(a).n for a in env.agents}

    @jax.jit
    def step(key, states):
        key, act_key, step_key = jax.random.split(key, 3)
        if masked:
            avail = jax.vmap(env.get_avail_actions)(states)
        else:
            avail = {a: jnp.ones((num_envs, n_actions[a])) for a in env.agents}
        keys = jax.random.split(act_key, len(env.agents))
        actions = {
            a: jax.random.categorical(k, jnp.log(avail[a].astype(jnp.float32)))
            for a, k in zip(env.agents, keys, strict=True)
        }
        _, states, _, dones, _ = jax.vmap(env.step)(
            jax.random.split(step_key, num_envs), states, actions
        )
        return key, states, dones["__all__"]

    key = jax.random.PRNGKey(seed)
    _, states = jax.vmap(env.reset)(jax.random.split(key, num_envs))
    for _ in range(5):  # compile and warm up
        key, states, done = step(key, states)
    done.block_until_ready()
    calls = max(1, steps // num_envs)
    start = time.perf_counter()
    for _ in range(calls):
        key, states, done = step(key, states)
    done.block_until_ready()
    return calls * num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--scenario", default="3m", help="SMAX map (without --env)")
    parser.add_argument("--env", default=None, help="any jaxmarl:<env>[:<layout>] name")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--copies-up-to", type=int, default=8)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    common.start_ray(num_cpus=2)
    env_name = args.env or f"smax:{args.scenario}"
    rows = []
    for num_envs in args.num_envs:
        raw = raw_steps_per_second(env_name, num_envs, args.steps)
        batched = sampling_steps_per_second(env_name, num_envs, args.steps, "batched")
        chunks = sampling_steps_per_second(env_name, num_envs, args.steps, "batched", "chunks")
        small = min(args.steps, 4000)  # the per-world paths run at a few hundred steps/s
        per_world = sampling_steps_per_second(env_name, num_envs, small, "per_world")
        copies = None  # each one-world copy compiles its own jitted functions
        if num_envs <= args.copies_up_to:
            copies = sampling_steps_per_second(env_name, num_envs, small, "copies")
        rows.append((num_envs, raw, batched, chunks, per_world, copies))
        print(
            f"num_envs {num_envs:3d}: raw env {raw:8.0f} | batched rollout, blocks "
            f"{batched:6.0f} ({batched / raw:.3f} of raw), episode chunks {chunks:6.0f} "
            f"({chunks / raw:.3f}) | per-world path {per_world:6.0f} | one-world copies "
            f"{copies or float('nan'):6.0f}",
            flush=True,
        )
    ray.shutdown()
    print(f"\n{env_name}\n\n| worlds | raw env | batched rollout: blocks | share of raw | "
          "episode chunks | share of raw | RLlib per-world path | blocks / per-world | "
          "one-world copies |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for num_envs, raw, batched, chunks, per_world, copies in rows:
        print(
            f"| {num_envs} | {raw:.0f} | {batched:.0f} | {batched / raw:.3f} | {chunks:.0f} | "
            f"{chunks / raw:.3f} | {per_world:.0f} | {batched / per_world:.1f} | "
            f"{f'{copies:.0f}' if copies else '–'} |"
        )


if __name__ == "__main__":
    main()
