"""Samplers that keep batches to one group (orientation) and, optionally, one shape.

See :mod:`mmpar.data.samplers._dataset_info` for what a dataset may expose
(``flag``, ``img_sizes``). The ``Infinite*`` batch samplers serve
iteration-based training: they never run out and change order on every pass.
"""

from mmpar.data.samplers.distributed_group_sampler import DistributedGroupSampler
from mmpar.data.samplers.distributed_sampler import DistributedSampler
from mmpar.data.samplers.group_sampler import GroupSampler
from mmpar.data.samplers.infinite_sampler import InfiniteBatchSampler, InfiniteGroupBatchSampler

__all__ = [
    "DistributedGroupSampler",
    "DistributedSampler",
    "GroupSampler",
    "InfiniteBatchSampler",
    "InfiniteGroupBatchSampler",
]
