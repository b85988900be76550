"""The sparse convolution's rows of the 3D ops section (``tools/bench/ops3d.py``).

:func:`rows` times mmpar's sparse convolution (``mmcv.ops.SubMConv3d`` and kin) with
the section's ``compare`` (alternating rounds, one thread, median of the per-round
ratios) against spconv 2.3.8's CPU build (``pip install spconv==2.3.8``), the sparse
convolution mmdet3d 1.0 uses when spconv 2 is installed; the rows are skipped when
spconv does not import. The same weights serve both (mmcv's ``(*k, C_in, C_out)``
permuted to spconv 2's ``(C_out, *k, C_in)``); the first run checks that both give
the same dense output.

The voxels: a 64-beam lidar sweep (elevations -24.8 to 2 degrees, azimuth step 0.22
degrees over the front 90 degrees) of a street, ray-cast onto the ground plane, two
building walls, 19 cars and 30 poles, voxelised on SECOND's KITTI grid (0.05 x 0.05 x
0.1 m, ``sparse_shape`` [41, 1600, 1408]) and capped at 16,000 voxels (``quick``:
4,000), 4 features: scan lines on surfaces, about 3 occupied neighbours per voxel at
full resolution, as a KITTI frame.

* SECOND's sparse middle encoder (mmdet3d's ``SparseEncoder``: in_channels 4, order
  conv/norm/act, encoder_channels ((16,), (32, 32, 32), (64, 64, 64), (64, 64, 64)),
  ``SubMConv3d`` 3x3x3, ``SparseConv3d`` 3x3x3 stride 2 between stages, output
  ``SparseConv3d`` (3, 1, 1) stride (2, 1, 1) to 128 channels, then ``dense()``),
  forward in eval mode against spconv's forward: target no slower (<= 1x); and the
  same without the final ``dense()`` (spconv's transposes the whole grid, mmpar's
  writes the sites into the channel-first grid);
* the same, forward + backward in train mode (loss: the sum of the dense output)
  against spconv's forward (spconv's CPU build cannot run a backward): within 3x;
* one ``SubMConv3d`` 16 -> 16 and one ``SparseConv3d`` 16 -> 32 stride 2 on the voxels,
  each with its rulebook, against spconv's: within 3x.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Callable, List, Tuple

import ops3d_common as common
import torch
from torch import Tensor, nn

#: ``(op, case, reference, ours_s, reference_s, ratio, target)``, as ``ops.py``'s rows.
Row = Tuple[str, str, str, float, float, float, str]
SPARSE_SHAPE = [41, 1600, 1408]


def _ray_hits(dirs: Tensor) -> Tensor:
    """Distance along each unit ray ``(R, 3)`` from the origin to the scene, inf for none."""
    gen = torch.Generator().manual_seed(0)
    inf = torch.full((dirs.shape[0],), math.inf, dtype=dirs.dtype)
    ground = -1.73
    t = torch.where(dirs[:, 2] < -1e-6, ground / dirs[:, 2], inf)
    for wall_y in (-12.0, 15.0):
        hit = dirs[:, 1] * wall_y > 1e-9
        t = torch.minimum(t, torch.where(hit, wall_y / dirs[:, 1], inf))
    boxes = []
    for i in range(19):  # cars: parked on both sides, three on the road
        x = 6 + 55 * torch.rand(1, generator=gen).item()
        y = (-8.5 if i % 2 else 9.0) if i < 16 else (torch.rand(1, generator=gen).item() - 0.5) * 4
        boxes.append((x - 2.0, y - 0.8, ground, x + 2.0, y + 0.8, ground + 1.5))
    for i in range(30):  # poles along the walls
        x = 4 + 60 * torch.rand(1, generator=gen).item()
        y = -11.0 if i % 2 else 14.0
        boxes.append((x - 0.15, y - 0.15, ground, x + 0.15, y + 0.15, ground + 4.0))
    inv = 1.0 / torch.where(dirs.abs() < 1e-12, torch.full_like(dirs, 1e-12), dirs)
    for box in boxes:
        lo, hi = torch.tensor(box[:3], dtype=dirs.dtype), torch.tensor(box[3:], dtype=dirs.dtype)
        near = torch.minimum(lo * inv, hi * inv).amax(1)
        far = torch.maximum(lo * inv, hi * inv).amin(1)
        t = torch.where((near <= far) & (near > 0), torch.minimum(t, near), t)
    return t


def lidar_voxels(max_voxels: int, seed: int = 0) -> Tuple[Tensor, Tensor]:
    """``(features (N, 4), coors (N, 4) int32 (batch, z, y, x))`` of one lidar sweep."""
    elev = torch.linspace(math.radians(-24.8), math.radians(2.0), 64, dtype=torch.float64)
    azim = torch.arange(-45.0, 45.0, 0.22, dtype=torch.float64) * math.pi / 180
    e, a = torch.meshgrid(elev, azim, indexing="ij")
    dirs = torch.stack([e.cos() * a.cos(), e.cos() * a.sin(), e.sin()], -1).reshape(-1, 3)
    t = _ray_hits(dirs)
    keep = torch.isfinite(t) & (t < 90)
    gen = torch.Generator().manual_seed(seed)
    points = dirs[keep] * t[keep, None]
    points = points + 0.01 * torch.randn(points.shape, generator=gen, dtype=points.dtype)
    voxel = torch.tensor([0.05, 0.05, 0.1], dtype=points.dtype)
    low = torch.tensor([0.0, -40.0, -3.0], dtype=points.dtype)
    cells = ((points - low) / voxel).floor().long()
    inside = ((cells >= 0) & (cells < torch.tensor([1408, 1600, 40]))).all(1)
    zyx = torch.unique(cells[inside][:, [2, 1, 0]], dim=0)
    zyx = zyx[torch.randperm(zyx.shape[0], generator=gen)[:max_voxels]]
    coors = torch.cat([torch.zeros(zyx.shape[0], 1, dtype=torch.long), zyx], 1).to(torch.int32)
    return torch.randn(zyx.shape[0], 4, generator=gen), coors


def _block(ns: Any, cin: int, cout: int, kernel: Any, key: str, stride: Any, padding: Any) -> Any:
    """conv / BN1d / ReLU, as mmdet3d's ``make_sparse_convmodule`` builds it."""
    if stride == 1:
        conv = ns.SubMConv3d(cin, cout, kernel, padding=padding, bias=False, indice_key=key)
    else:
        conv = ns.SparseConv3d(
            cin, cout, kernel, stride=stride, padding=padding, bias=False, indice_key=key
        )
    norm = nn.BatchNorm1d(cout, eps=1e-3, momentum=0.01)
    return ns.SparseSequential(conv, norm, nn.ReLU(inplace=True))


def second_encoder(ns: Any) -> nn.Module:
    """SECOND's ``SparseEncoder`` (mmdet3d 1.0) from ``ns``'s sparse modules."""
    layers = [_block(ns, 4, 16, 3, "subm1", 1, 1)]
    channels = ((16,), (32, 32, 32), (64, 64, 64), (64, 64, 64))
    paddings = ((1,), (1, 1, 1), (1, 1, 1), ((0, 1, 1), 1, 1))
    cin = 16
    for i, stage in enumerate(channels):
        for j, cout in enumerate(stage):
            if i and not j:
                layers.append(_block(ns, cin, cout, 3, f"spconv{i + 1}", 2, paddings[i][j]))
            else:
                layers.append(_block(ns, cin, cout, 3, f"subm{i + 1}", 1, paddings[i][j]))
            cin = cout
    layers.append(_block(ns, cin, 128, (3, 1, 1), "spconv_down2", (2, 1, 1), 0))
    return ns.SparseSequential(*layers)


def _same_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """Random weights of unit-scale outputs in ``ours``, copied into ``theirs``."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for (name, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
            if a.dim() == 5:  # (*k, C_in, C_out) -> spconv 2's (C_out, *k, C_in)
                fan_in = a[..., 0].numel()
                a.copy_(torch.randn(a.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                b.copy_(a.permute(4, 0, 1, 2, 3))
            else:
                b.copy_(a)


def _mmpar_modules() -> SimpleNamespace:
    from mmpar.compat.ops import sparse_conv, sparse_modules, sparse_structure

    return SimpleNamespace(
        SubMConv3d=sparse_conv.SubMConv3d,
        SparseConv3d=sparse_conv.SparseConv3d,
        SparseSequential=sparse_modules.SparseSequential,
        SparseConvTensor=sparse_structure.SparseConvTensor,
    )


def _runner(
    ns: Any, net: nn.Module, feats: Tensor, coors: Tensor, train: bool, dense: bool = True
) -> Callable:
    def forward() -> Tensor:
        x = ns.SparseConvTensor(feats, coors, SPARSE_SHAPE, 1)
        if train:
            net(x).dense().sum().backward()
            return None
        with torch.no_grad():
            out = net(x)
            return out.dense() if dense else out.features

    return forward


def rows(quick: bool) -> List[Row]:
    """The rows, timed on one thread; none without spconv."""
    try:
        import spconv.pytorch as sp
    except ImportError:
        return []
    compare = common.ops().compare
    rounds = 2 if quick else 7
    feats, coors = lidar_voxels(4000 if quick else 16000)
    ours_ns = _mmpar_modules()
    case = f"{coors.shape[0]} voxels of a lidar sweep, sparse_shape {SPARSE_SHAPE}"
    ref_name = "spconv 2.3.8 CPU forward"
    out: List[Row] = []
    ours, theirs = second_encoder(ours_ns).eval(), second_encoder(sp).eval()
    _same_weights(ours, theirs)
    run_ours = _runner(ours_ns, ours, feats, coors, False)
    run_theirs = _runner(sp, theirs, feats, coors, False)
    torch.testing.assert_close(run_ours(), run_theirs(), rtol=1e-3, atol=1e-3)
    timing = compare(run_ours, run_theirs, rounds)
    out.append(("SECOND SparseEncoder forward", case, ref_name, *timing, "<= 1x"))
    timing = compare(
        _runner(ours_ns, ours, feats, coors, False, dense=False),
        _runner(sp, theirs, feats, coors, False, dense=False),
        rounds,
    )
    out.append(("SECOND SparseEncoder forward, no dense()", case, ref_name, *timing, "<= 1x"))
    ours.train()
    timing = compare(_runner(ours_ns, ours, feats, coors, True), run_theirs, rounds)
    out.append(("SECOND SparseEncoder forward+backward", case, ref_name, *timing, "<= 3x"))
    for name, ours_layer, their_layer in (
        (
            "SubMConv3d 16->16 3x3x3",
            ours_ns.SubMConv3d(16, 16, 3),
            sp.SubMConv3d(16, 16, 3, padding=1),
        ),
        (
            "SparseConv3d 16->32 3x3x3 stride 2",
            ours_ns.SparseConv3d(16, 32, 3, 2, 1),
            sp.SparseConv3d(16, 32, 3, 2, 1),
        ),
    ):
        _same_weights(ours_layer, their_layer)
        x16 = torch.randn(feats.shape[0], 16)
        timing = compare(
            _runner(ours_ns, ours_layer, x16, coors, False, dense=False),
            _runner(sp, their_layer, x16, coors, False, dense=False),
            rounds,
        )
        out.append((f"{name} (with its rulebook)", case, "spconv 2.3.8 CPU", *timing, "<= 3x"))
    return out
