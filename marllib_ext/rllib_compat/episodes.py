"""RLlib internals of episodes: joining chunks of one episode, and the package's episode
class, whose agents iterate in sorted order and whose slices keep their infos."""

from __future__ import annotations

import functools

from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
from ray.rllib.utils.annotations import override


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
    """A set of agent ids that iterates in sorted order (by ``str``); set operations
    (``|``, ``&``, ``-``, ``^`` and their named forms) return one too."""

    def __iter__(self):
        return iter(sorted(set.__iter__(self), key=str))


def _keeps_sorted(operation):
    @functools.wraps(operation)
    def sorted_result(self, *others):
        result = operation(self, *others)
        return result if result is NotImplemented else SortedAgentSet(result)

    return sorted_result


for _name in (
    *("__or__", "__ror__", "__and__", "__rand__", "__sub__", "__rsub__", "__xor__", "__rxor__"),
    *("union", "intersection", "difference", "symmetric_difference", "copy"),
):
    setattr(SortedAgentSet, _name, _keeps_sorted(getattr(set, _name)))


class SortedAgentsEpisode(MultiAgentEpisode):
    """A ``MultiAgentEpisode`` whose agent sets iterate in sorted order and whose slices
    keep their infos; its cuts and slices are of this class too. The package's env
    runners start every episode as one (``env_runners.StartsSortedAgentsEpisodes``) and
    its learners read RLlib's (replayed) episodes as ones
    (``learners.ReadsEpisodesAsSortedAgents``); RLlib's own class is left as it is.

    Why sorted: RLlib's connectors build the module batches by iterating
    ``agent_ids``, ``get_agents_to_act()`` and ``get_agents_that_stepped()`` (e.g.
    ``ConnectorV2.single_agent_episode_iterator``, ``AgentToModuleMapping``). A set of
    strings iterates in an order that depends on Python's per-process hash seed, so the
    rows of a shared policy's batch, and with them which agent gets which action
    sample, would differ between two processes run with the same ``--seed``.

    Why infos: RLlib 2.60's ``MultiAgentEpisode.slice`` builds the new episode without
    its infos, so every info of a slice is ``{}``. Data-parallel learners get their
    share of a batch through ``ShardEpisodesIterator``, which slices any episode that
    straddles two learners; the central critics read the global state from those infos.

    Relies on: RLlib 2.60 builds the three agent sets in ``MultiAgentEpisode`` (two
    methods and a property) and its callers only iterate them, test membership or
    combine them with set operations; ``cut()`` and ``slice()`` (``episode[a:b]``) build
    a new ``MultiAgentEpisode``; in a slice each agent's episode starts at agent step
    ``t_started`` and its observations buffer (lookback included) covers the agent steps
    whose infos it needs, which the source agent episode holds; ``MultiAgentEpisode``
    has ``__slots__``, so this class adds none (an episode's class can be switched)."""

    __slots__ = ()

    @property
    def agent_ids(self) -> SortedAgentSet:
        return SortedAgentSet(super().agent_ids)

    @override(MultiAgentEpisode)
    def get_agents_to_act(self) -> SortedAgentSet:
        return SortedAgentSet(super().get_agents_to_act())

    @override(MultiAgentEpisode)
    def get_agents_that_stepped(self) -> SortedAgentSet:
        return SortedAgentSet(super().get_agents_that_stepped())

    @override(MultiAgentEpisode)
    def cut(self, len_lookback_buffer: int = 0) -> SortedAgentsEpisode:
        return as_sorted_agents_episode(super().cut(len_lookback_buffer=len_lookback_buffer))

    @override(MultiAgentEpisode)
    def slice(self, slice_: slice, *, len_lookback_buffer: int | None = None):
        sliced = super().slice(slice_, len_lookback_buffer=len_lookback_buffer)
        for agent_id, part in sliced.agent_episodes.items():
            source = self.agent_episodes[agent_id]
            lookback = part.observations.lookback
            first = part.t_started - source.t_started - lookback
            infos = source.get_infos(
                slice(first, first + len(part.observations.data)), neg_index_as_lookback=True
            )
            part.infos = InfiniteLookbackBuffer(data=list(infos), lookback=lookback)
        return as_sorted_agents_episode(sliced)


def as_sorted_agents_episode(episode: MultiAgentEpisode) -> SortedAgentsEpisode:
    """``episode`` itself, now a ``SortedAgentsEpisode`` (the subclass adds no state)."""
    if not isinstance(episode, SortedAgentsEpisode):
        episode.__class__ = SortedAgentsEpisode
    return episode
