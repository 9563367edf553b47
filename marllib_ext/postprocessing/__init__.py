"""The on-policy team batch: one builder over ``(T, B)`` team arrays
(``block_batch``) and the learner connector that hands it episode chunks."""

from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector

__all__ = ["JointAdvantageConnector"]
