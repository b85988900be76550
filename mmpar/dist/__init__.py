"""Process groups: join one from a launcher's environment (torchrun, SLURM, MPI),
query it, share values and bring per-rank results together in dataset order.

mmpar has no cluster layer of its own: everything here is ``torch.distributed``.
"""

from mmpar.dist.init import LAUNCHERS, check_gpu_per_process, init_dist
from mmpar.dist.results import all_gather_object_list, collect_results
from mmpar.dist.slurm import expand_slurm_nodelist, slurm_first_host
from mmpar.dist.utils import (
    barrier,
    collective_device,
    destroy_dist,
    get_dist_info,
    is_distributed,
    is_main_process,
    master_only,
    sync_random_seed,
)

__all__ = [
    "LAUNCHERS",
    "all_gather_object_list",
    "barrier",
    "check_gpu_per_process",
    "collect_results",
    "collective_device",
    "destroy_dist",
    "expand_slurm_nodelist",
    "get_dist_info",
    "init_dist",
    "is_distributed",
    "is_main_process",
    "master_only",
    "slurm_first_host",
    "sync_random_seed",
]
