"""RLlib internals of episodes: joining chunks of one episode, slicing one with its
infos, and the order in which RLlib iterates an episode's agents."""

from __future__ import annotations

import functools

from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer


def concat_episode_chunk(head, tail) -> None:
    """``head.concat_episode(tail)`` where ``tail`` holds a hanging reward without a
    hanging action for an agent ``head`` has not seen (an agent that arrives or leaves
    between observations, e.g. on ``toy:come_and_go``).

    Relies on: RLlib 2.60's ``MultiAgentEpisode._copy_hanging`` copies an agent's
    ``_hanging_actions_end`` and ``_hanging_extra_model_outputs_end`` whenever it is in
    ``_hanging_rewards_end`` and raises ``KeyError`` when they are missing. Stand-ins
    are added to ``tail`` for the call and removed from both chunks after it, so
    ``head`` ends with ``tail``'s hanging state."""
    stand_ins = [
        agent for agent in tail._hanging_rewards_end if agent not in tail._hanging_actions_end
    ]
    no_outputs = [a for a in stand_ins if a not in tail._hanging_extra_model_outputs_end]
    for agent in stand_ins:
        tail._hanging_actions_end[agent] = None
    for agent in no_outputs:
        tail._hanging_extra_model_outputs_end[agent] = {}
    try:
        head.concat_episode(tail)
    finally:
        for episode in (head, tail):
            for agent in stand_ins:
                episode._hanging_actions_end.pop(agent, None)
            for agent in no_outputs:
                episode._hanging_extra_model_outputs_end.pop(agent, None)


class SortedAgentSet(set):
    """A set of agent ids that iterates in sorted order (by ``str``)."""

    def __iter__(self):
        return iter(sorted(set.__iter__(self), key=str))


def iterate_agents_in_sorted_order() -> None:
    """``MultiAgentEpisode.agent_ids``, ``get_agents_to_act`` and
    ``get_agents_that_stepped`` return sets that iterate in sorted order. Idempotent.

    Why: RLlib's connectors build the module batches by iterating these sets (e.g.
    ``ConnectorV2.single_agent_episode_iterator``, ``AgentToModuleMapping``). A set of
    strings iterates in an order that depends on Python's per-process hash seed, so the
    rows of a shared policy's batch, and with them which agent gets which action
    sample, differed between two processes run with the same ``--seed``.

    Relies on: RLlib 2.60 builds those three sets in ``MultiAgentEpisode`` (two methods
    and a property) and its callers only iterate them, test membership or combine them
    with set operations."""
    if getattr(MultiAgentEpisode, "_marllib_sorted_agents", False):
        return
    agents_to_act = MultiAgentEpisode.get_agents_to_act
    agents_that_stepped = MultiAgentEpisode.get_agents_that_stepped
    agent_ids = MultiAgentEpisode.agent_ids.fget

    @functools.wraps(agents_to_act)
    def get_agents_to_act(self):
        return SortedAgentSet(agents_to_act(self))

    @functools.wraps(agents_that_stepped)
    def get_agents_that_stepped(self):
        return SortedAgentSet(agents_that_stepped(self))

    MultiAgentEpisode.get_agents_to_act = get_agents_to_act
    MultiAgentEpisode.get_agents_that_stepped = get_agents_that_stepped
    MultiAgentEpisode.agent_ids = property(
        functools.wraps(agent_ids)(lambda self: SortedAgentSet(agent_ids(self)))
    )
    MultiAgentEpisode._marllib_sorted_agents = True


def keep_infos_when_slicing() -> None:
    """``MultiAgentEpisode.slice`` (and ``episode[a:b]``) keeps every agent's infos.
    Idempotent.

    Why: RLlib 2.60's ``MultiAgentEpisode.slice`` builds the new episode without its
    infos, so every info of a slice is ``{}``. Data-parallel learners get their share of
    a batch through ``ShardEpisodesIterator``, which slices any episode that straddles
    two learners; the central critics read the global state from those infos.

    Relies on: in the slice, each agent's episode starts at agent step ``t_started`` and
    its observations buffer (lookback included) covers the agent steps whose infos it
    needs; the source agent episode holds those infos."""
    if getattr(MultiAgentEpisode, "_marllib_slices_keep_infos", False):
        return
    slice_without_infos = MultiAgentEpisode.slice

    @functools.wraps(slice_without_infos)
    def slice_with_infos(self, slice_, *, len_lookback_buffer=None):
        sliced = slice_without_infos(self, slice_, len_lookback_buffer=len_lookback_buffer)
        for agent_id, part in sliced.agent_episodes.items():
            source = self.agent_episodes[agent_id]
            lookback = part.observations.lookback
            first = part.t_started - source.t_started - lookback
            infos = source.get_infos(
                slice(first, first + len(part.observations.data)), neg_index_as_lookback=True
            )
            part.infos = InfiniteLookbackBuffer(data=list(infos), lookback=lookback)
        return sliced

    MultiAgentEpisode.slice = slice_with_infos
    MultiAgentEpisode._marllib_slices_keep_infos = True
