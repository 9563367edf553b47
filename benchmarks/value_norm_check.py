"""Whether value normalization acts: ``mappo`` on MaMuJoCo HalfCheetah 2x3 for a few
iterations with and without ``value_norm``, printing the critic's value loss, its
explained variance, its mean value and (normalized) the running moments of the targets.

    python benchmarks/value_norm_check.py --iterations 6
"""

from __future__ import annotations

import argparse

import ray

from marllib_ext import algos, make_env
from marllib_ext.ops.value_norm import mean_and_variance
from marllib_ext.policies.joint_critic import CRITIC_MODULE_ID
from marllib_ext.rllib_compat import local_learner, plain_module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    env = make_env("mamujoco:HalfCheetah", agent_conf="2x3")
    for value_norm in (False, True):
        algorithm = (
            algos.mappo(value_norm=value_norm, num_env_runners=0)
            .rllib_config(env, share_policy="individual", seed=args.seed)
            .build_algo()
        )
        for _ in range(args.iterations):
            result = algorithm.train()
        critic = result["learners"][CRITIC_MODULE_ID]
        line = (
            f"value_norm={value_norm}: vf_loss {critic['vf_loss']:.3f}, explained variance "
            f"{critic['vf_explained_var']:.3f}, mean value {critic['team_value_mean']:.2f}"
        )
        if value_norm:
            module = plain_module(local_learner(algorithm).module, CRITIC_MODULE_ID)
            mu, var = mean_and_variance(module.moments())
            line += f", targets' running mean {float(mu):.2f} and std {float(var) ** 0.5:.2f}"
        print(line)
        algorithm.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
