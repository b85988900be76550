"""mmpar.compat.ops.points_sampler against the kernel simulation, range by range."""

from __future__ import annotations

import pytest
import torch

from mmpar.compat.ops.points_sampler import (
    DFPSSampler,
    FFPSSampler,
    FSSampler,
    PointsSampler,
    calc_square_dist,
    get_sampler_cls,
)
from tests.compat.ops._reference import DEVICES
from tests.compat.ops.test_ops_furthest_point_sample import ref_fps, ref_fps_dist


def inputs(b: int = 2, n: int = 20, c: int = 4) -> tuple:
    gen = torch.Generator().manual_seed(b * 100 + n)
    return torch.randn(b, n, 3, generator=gen), torch.randn(b, c, n, generator=gen)


def ref_square_dist(a: torch.Tensor) -> torch.Tensor:
    rows = a.double().tolist()
    return torch.tensor(
        [[[sum((u - v) ** 2 for u, v in zip(p, q)) for q in pts] for p in pts] for pts in rows]
    )


def ref_ffps(xyz: torch.Tensor, features: torch.Tensor, m: int) -> list:
    joint = torch.cat([xyz, features.transpose(1, 2)], dim=2)
    return ref_fps_dist(ref_square_dist(joint), m)


def test_calc_square_dist() -> None:
    a, b = torch.randn(2, 5, 3), torch.randn(2, 4, 3)
    square = ((a[:, :, None] - b[:, None]) ** 2).sum(-1)
    torch.testing.assert_close(calc_square_dist(a, b, norm=False), square)
    # mmcv's norm=True: the (not squared) distance divided by the channels.
    torch.testing.assert_close(calc_square_dist(a, b), square.sqrt() / 3)


@pytest.mark.parametrize("device", DEVICES)
def test_modes(device: str) -> None:
    xyz, features = inputs()
    dfps = PointsSampler([6])(xyz.to(device), None)
    assert dfps.dtype == torch.int32 and dfps.tolist() == ref_fps(xyz, 6)
    ffps = PointsSampler([6], ["F-FPS"])(xyz.to(device), features.to(device))
    assert ffps.tolist() == ref_ffps(xyz, features, 6)
    fs = PointsSampler([6], ["FS"])(xyz.to(device), features.to(device))
    assert fs.tolist() == [f + d for f, d in zip(ref_ffps(xyz, features, 6), ref_fps(xyz, 6))]


def test_ranges_are_offset_and_concatenated() -> None:
    # 3DSSD's layout: F-FPS on the first 12 points, D-FPS on the rest.
    xyz, features = inputs(n=20)
    sampler = PointsSampler([4, 3], ["F-FPS", "D-FPS"], [12, -1])
    got = sampler(xyz, features).tolist()
    first = ref_ffps(xyz[:, :12], features[:, :, :12], 4)
    rest = ref_fps(xyz[:, 12:], 3)
    assert got == [f + [12 + i for i in r] for f, r in zip(first, rest)]


def test_minus_one_before_the_last_range_starts_the_next_at_the_last_point() -> None:
    # mmcv's quirk: the next range starts at index -1.
    xyz, _ = inputs(n=10)
    got = PointsSampler([3, 1], ["D-FPS", "D-FPS"], [-1, -1])(xyz, None)
    assert got[:, :3].tolist() == ref_fps(xyz, 3) and got[:, 3].tolist() == [-1, -1]


def test_half_inputs_sample_in_float32() -> None:
    xyz, features = inputs()
    sampler = PointsSampler([5], ["FS"])
    expected = sampler(xyz.half().float(), features.half().float())
    assert torch.equal(sampler(xyz.half(), features.half()), expected)


def test_samplers_and_classes() -> None:
    assert get_sampler_cls("D-FPS") is DFPSSampler
    assert get_sampler_cls("F-FPS") is FFPSSampler and get_sampler_cls("FS") is FSSampler
    assert not PointsSampler([1]).fp16_enabled


def test_empty_batch() -> None:
    xyz, features = inputs(b=0)
    assert PointsSampler([4], ["FS"])(xyz, features).shape == (0, 8)


def test_bad_input() -> None:
    with pytest.raises(KeyError, match="sampler_type must be one of"):
        get_sampler_cls("X-FPS")
    with pytest.raises(ValueError, match=r"sampler_type must be one of \['D-FPS', 'F-FPS', 'FS'\]"):
        PointsSampler([1], ["X-FPS"])
    with pytest.raises(AssertionError, match="must have the same length, found 2, 1 and 1"):
        PointsSampler([1, 2])
    xyz, features = inputs(n=10)
    with pytest.raises(ValueError, match="entries must be below the number of points 10, found 10"):
        PointsSampler([2], ["D-FPS"], [10])(xyz, features)
    with pytest.raises(ValueError, match="features must be given to FFPSSampler, found None"):
        PointsSampler([2], ["F-FPS"])(xyz, None)
