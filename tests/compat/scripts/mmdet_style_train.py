"""Train a detector in the style of mmdet 2.x's tools/train.py, on mmcv 1.x's runner.

A test fixture (tests/compat/test_compat_train_script.py): a user's mmdet 2.x
training script whose only change for mmpar is the ``patch_mmcv()`` line below
(the test also runs a copy without it through ``python -m mmpar.compat.run``).
Everything else is mmcv and mmdet: ``Config``, mmdet's ``CocoDataset`` and
pipeline, mmdet's ``build_dataloader``, ``MMDistributedDataParallel`` /
``build_dp`` from ``mmcv.parallel`` / mmdet, mmcv's ``build_optimizer``,
``build_runner`` and hooks. The runner is composed as mmdet's
``train_detector`` does: that function itself needs CUDA for distributed
training (mmdet's ``build_ddp`` accepts cuda/mlu/npu only).

Run with this checkout's root on PYTHONPATH (the test stand-ins come from
``tests.compat._mmcv_env``). Each rank writes ``interop_rank<r>.json`` into the
work dir: which classes the run used.
"""
# Test stand-ins for what this machine lacks: torchvision, mmcv's compiled ops.
from tests.compat._mmcv_env import install_stand_ins
install_stand_ins()
from mmpar.compat import patch_mmcv; patch_mmcv()  # noqa: E702,E402

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os.path as osp  # noqa: E402
import time  # noqa: E402

import mmcv  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from mmcv import Config, DictAction  # noqa: E402
from mmcv.parallel import MMDistributedDataParallel  # noqa: E402
from mmcv.parallel import DataContainer, collate  # noqa: E402
from mmcv.runner import (DistSamplerSeedHook, Hook, build_optimizer,  # noqa: E402
                         build_runner, get_dist_info, init_dist)
from torch import nn  # noqa: E402

from mmdet import __version__  # noqa: E402
from mmdet.apis import set_random_seed  # noqa: E402
from mmdet.datasets import build_dataloader, build_dataset  # noqa: E402
from mmdet.models import DETECTORS, build_detector  # noqa: E402
from mmdet.models.detectors import BaseDetector  # noqa: E402
from mmdet.utils import build_dp, get_root_logger  # noqa: E402


@DETECTORS.register_module()
class TinyDetector(BaseDetector):
    """One conv, a class head and a box head: per image, the first box's label and
    the mean of its boxes (relative to the padded batch)."""

    def __init__(self, num_classes, train_cfg=None, test_cfg=None,
                 init_cfg=None):
        super().__init__(init_cfg)
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.cls_head = nn.Linear(8, num_classes)
        self.box_head = nn.Linear(8, 4)

    def extract_feat(self, img):
        return F.relu(self.conv(img)).mean(dim=(2, 3))

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, **kwargs):
        # Data parallel wrappers hand the model plain tensors and lists.
        if not (isinstance(img, torch.Tensor) and isinstance(img_metas, list)
                and all(isinstance(m, dict) for m in img_metas)
                and all(isinstance(b, torch.Tensor) for b in gt_bboxes)
                and all(isinstance(t, torch.Tensor) for t in gt_labels)):
            raise TypeError(
                f'TinyDetector got img={type(img)}, img_metas={type(img_metas)}, '
                f'gt_bboxes={type(gt_bboxes)}, gt_labels={type(gt_labels)}')
        super().forward_train(img, img_metas)
        feat = self.extract_feat(img)
        h, w = img_metas[0]['batch_input_shape']
        labels = torch.stack([t[0] for t in gt_labels])
        boxes = torch.stack(
            [b.mean(dim=0) / b.new_tensor([w, h, w, h]) for b in gt_bboxes])
        return dict(
            loss_cls=F.cross_entropy(self.cls_head(feat), labels),
            loss_bbox=F.l1_loss(self.box_head(feat).sigmoid(), boxes))

    def simple_test(self, img, img_metas, rescale=False):
        return self.cls_head(self.extract_feat(img)).argmax(dim=1).tolist()

    def aug_test(self, imgs, img_metas, rescale=False):
        raise NotImplementedError


class InteropReport(Hook):
    """Writes which DataContainer / collate / wrapper classes this rank used."""

    def __init__(self, work_dir):
        self.work_dir = work_dir
        self.batch_types = set()

    def after_train_iter(self, runner):
        self.batch_types.update(
            f'{type(v).__module__}.{type(v).__qualname__}'
            for v in runner.data_batch.values())

    def after_run(self, runner):
        rank, world_size = get_dist_info()
        wrapper = type(runner.model)
        report = dict(
            rank=rank, world_size=world_size, epochs=runner.epoch,
            iters=runner.iter, batch_types=sorted(self.batch_types),
            data_container=f'{DataContainer.__module__}.{DataContainer.__qualname__}',
            collate=f'{collate.__module__}.{collate.__qualname__}',
            model_wrapper=f'{wrapper.__module__}.{wrapper.__qualname__}')
        with open(osp.join(self.work_dir, f'interop_rank{rank}.json'), 'w') as f:
            json.dump(report, f)


def parse_args():
    parser = argparse.ArgumentParser(description='Train a detector')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--seed', type=int, default=0, help='random seed')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override some settings in the used config')
    parser.add_argument(
        '--launcher', choices=['none', 'pytorch'], default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    return parser.parse_args()


def train_detector(model, dataset, cfg, distributed=False, timestamp=None,
                   meta=None):
    logger = get_root_logger(log_level=cfg.log_level)
    dataset = dataset if isinstance(dataset, (list, tuple)) else [dataset]
    data_loaders = [
        build_dataloader(
            ds,
            cfg.data.samples_per_gpu,
            cfg.data.workers_per_gpu,
            num_gpus=1,
            dist=distributed,
            seed=cfg.seed,
            runner_type=cfg.runner['type'],
            persistent_workers=False) for ds in dataset
    ]
    if distributed:
        # What mmdet's build_ddp does on a GPU, on the CPU.
        model = MMDistributedDataParallel(
            model, device_ids=None, broadcast_buffers=False,
            find_unused_parameters=False)
    else:
        model = build_dp(model, 'cpu', device_ids=None)

    optimizer = build_optimizer(model, cfg.optimizer)
    runner = build_runner(
        cfg.runner,
        default_args=dict(
            model=model, optimizer=optimizer, work_dir=cfg.work_dir,
            logger=logger, meta=meta))
    runner.timestamp = timestamp
    runner.register_training_hooks(
        cfg.lr_config, cfg.optimizer_config, cfg.checkpoint_config,
        cfg.log_config, cfg.get('momentum_config', None))
    if distributed:
        runner.register_hook(DistSamplerSeedHook())
    runner.register_hook(InteropReport(cfg.work_dir))
    runner.run(data_loaders, cfg.workflow)


def main():
    args = parse_args()
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    cfg.work_dir = args.work_dir

    if args.launcher == 'none':
        distributed = False
    else:
        distributed = True
        if torch.cuda.is_available():
            init_dist(args.launcher, **cfg.dist_params)
        else:
            # mmcv's init_dist calls torch.cuda.set_device(rank % device_count()),
            # a division by zero without a GPU: join the group directly.
            dist.init_process_group(
                backend='gloo', timeout=datetime.timedelta(seconds=120))
    rank, world_size = get_dist_info()

    mmcv.mkdir_or_exist(osp.abspath(cfg.work_dir))
    cfg.dump(osp.join(cfg.work_dir, osp.basename(args.config)))
    timestamp = time.strftime('%Y%m%d_%H%M%S', time.localtime())
    log_file = osp.join(cfg.work_dir, f'{timestamp}.log')
    logger = get_root_logger(log_file=log_file, log_level=cfg.log_level)
    logger.info(f'Distributed training: {distributed}, world size {world_size}')
    logger.info(f'Config:\n{cfg.pretty_text}')

    cfg.seed = args.seed
    set_random_seed(args.seed)
    meta = dict(seed=args.seed, exp_name=osp.basename(args.config))

    model = build_detector(cfg.model)
    model.init_weights()
    datasets = [build_dataset(cfg.data.train)]
    cfg.checkpoint_config.meta = dict(
        mmdet_version=__version__, CLASSES=datasets[0].CLASSES)
    model.CLASSES = datasets[0].CLASSES
    train_detector(
        model, datasets, cfg, distributed=distributed, timestamp=timestamp,
        meta=meta)
    if distributed:
        dist.destroy_process_group()


if __name__ == '__main__':
    main()
