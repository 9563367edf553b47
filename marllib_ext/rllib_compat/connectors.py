"""RLlib's connector pipelines: reaching an env runner's, finding and replacing pieces
in one."""

from __future__ import annotations

from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.connector_v2 import ConnectorV2


def env_to_module(env_runner) -> ConnectorPipelineV2 | None:
    """An env runner's env-to-module pipeline (``None`` before it is built).

    Relies on: (MultiAgent)``EnvRunner`` stores it in ``_env_to_module``."""
    return getattr(env_runner, "_env_to_module", None)


def connectors_of(pipeline: ConnectorPipelineV2 | None, connector_class: type) -> list:
    """The connectors of ``connector_class`` in ``pipeline``.

    Relies on: ``ConnectorPipelineV2.__getitem__`` with a class returns every piece that
    is an instance of it (searching nested pipelines)."""
    return [] if pipeline is None else list(pipeline[connector_class])


def replace_connector(
    pipeline: ConnectorPipelineV2, old_class: type, new: ConnectorV2
) -> ConnectorPipelineV2:
    """``pipeline`` with every ``old_class`` piece removed and ``new`` appended last."""
    pipeline.remove(old_class)
    pipeline.append(new)
    return pipeline


def added_pieces(pipeline: ConnectorPipelineV2 | None) -> list[ConnectorV2]:
    """The pieces of ``pipeline`` that are not RLlib's own (the connectors an algorithm
    added, e.g. with ``env_runners(env_to_module_connector=...)``), in order.

    Relies on: ``ConnectorPipelineV2.connectors`` lists a pipeline's pieces (nested
    pipelines as pieces); RLlib's own pieces are defined under ``ray.rllib``."""
    if pipeline is None:
        return []
    found = []
    for piece in pipeline.connectors:
        if isinstance(piece, ConnectorPipelineV2):
            found.extend(added_pieces(piece))
        elif not type(piece).__module__.startswith("ray.rllib."):
            found.append(piece)
    return found
