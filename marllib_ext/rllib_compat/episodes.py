"""RLlib internals of episode chunks: joining chunks of one episode."""

from __future__ import annotations


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
