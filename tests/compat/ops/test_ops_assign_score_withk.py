"""mmpar.compat.ops.assign_score_withk against loops over its definition."""

from __future__ import annotations

import sys

import pytest
import torch

from mmpar.compat.ops.assign_score_withk import assign_score_withk
from tests.compat.ops._reference import DEVICES, HALF_DTYPES

# mmcv's own test (tests/test_ops/test_assign_score_withk.py, CUDA-only there): shapes and
# the numbers in row-major order.
MMCV_SCORES = (
    (2, 2, 4, 2),
    """
0.06947571 0.60657459 0.28462553 0.83785158 0.75959939 0.97220325 0.51915503 0.76618499
0.15348864 0.60510188 0.21510637 0.31916398 0.0023684499 0.58425951 0.67836761
0.52163482 0.23089725 0.5568468 0.74051023 0.064384222 0.68873942 0.22089851 0.050234199
0.79228795 0.44883424 0.15427643 0.13817799 0.34856772 0.79896212 0.33788306 0.15699774
0.7693662
""",
)
MMCV_POINTS = (
    (2, 8, 2, 4),
    """
0.060011212 0.92963666 0.5753327 0.72514772 0.53563064 0.23129565 0.92366195 0.44261628
0.57700223 0.56625944 0.23560429 0.11178821 0.7735967 0.95678777 0.25468266 0.028959749
0.058986899 0.090175152 0.59778619 0.027979851 0.60386199 0.35991007 0.85761684
0.3096559 0.22359002 0.13983732 0.55442429 0.68863827 0.85646236 0.75651926 0.8638947
0.83600986 0.45424145 0.27458847 0.64561123 0.47162914 0.15773582 0.47645122 0.79964715
0.33239079 0.83513987 0.84696376 0.94317323 0.29418713 0.77168906 0.69968712 0.19354361
0.033927679 0.30976456 0.70741332 0.58179498 0.976677 0.69656056 0.071991622 0.47085059
0.29117996 0.5829035 0.30201727 0.76556486 0.093544602 0.88030535 0.16129416 0.92425251
0.49545723 0.50899494 0.064828038 0.44939405 0.37704808 0.47028124 0.11969638 0.62823206
0.28560323 0.40690207 0.689753 0.51636654 0.23040164 0.069357872 0.00488842 0.22462702
0.091823816 0.26611632 0.0018433901 0.77306551 0.52281308 0.87776035 0.77895886
0.27871829 0.16620636 0.50257403 0.040390011 0.53684968 0.98379374 0.40973026 0.32382721
0.97330183 0.13988364 0.045862019 0.20983845 0.20662665 0.22270602 0.60387236 0.51555741
0.51237285 0.65284377 0.45735973 0.86821306 0.61054605 0.83703363 0.45193362 0.3734138
0.7825672 0.56994158 0.44591594 0.12447512 0.092820108 0.7055254 0.25223452 0.46696228
0.70511359 0.892151 0.49615085 0.47321403 0.93138885 0.76521969 0.38766378 0.30332977
0.23131835 0.028635141
""",
)
MMCV_CENTERS = (
    (2, 8, 2, 4),
    """
0.83878064 0.96658987 0.8033424 0.95983118 0.45035273 0.87689251 0.977736 0.54547966
0.01041394 0.597893 0.36212963 0.4410367 0.94879234 0.8372817 0.21237361 0.67945415
0.50960869 0.26401454 0.60034937 0.54174161 0.87591463 0.54645598 0.4096033 0.16373193
0.79547447 0.1482386 0.12840575 0.45384115 0.5640288 0.94454098 0.57453281 0.73229736
0.93011934 0.74060112 0.62621707 0.86779147 0.91563636 0.3595413 0.6678378 0.60853833
0.22431666 0.65617776 0.7483924 0.6263364 0.30968404 0.78204364 0.14899081 0.096287489
0.73675203 0.72104895 0.46480381 0.6101647 0.78176451 0.16572917 0.3311919 0.43407398
0.81931537 0.095596083 0.05978829 0.90262103 0.42560649 0.81655961 0.82064462 0.6604721
0.71596527 0.18600845 0.21433902 0.31596261 0.3921569 0.33221376 0.5061177 0.79618412
0.95338356 0.04785997 0.67185795 0.65383941 0.47291321 0.33404195 0.17750603 0.84456211
0.67557931 0.16193843 0.75943846 0.92123103 0.2781859 0.031144319 0.71063799 0.52729136
0.83761048 0.10858494 0.13208169 0.36577201 0.59307951 0.27390373 0.14036089 0.170403
0.34797889 0.89855295 0.048443791 0.98710293 0.29781651 0.024413699 0.91790468
0.80816108 0.12460887 0.44991326 0.19382608 0.35037738 0.27734721 0.43620569 0.36757517
0.59935093 0.29630446 0.90046406 0.54171127 0.13510644 0.096235387 0.04226565 0.32001644
0.44358212 0.52748477 0.82096446 0.94154888 0.71237481 0.7537517 0.80864823 0.85345286
0.74727541
""",
)
MMCV_KNN_IDX = (
    (2, 2, 4),
    """
6 7 4 6 2 4 2 4 7 1 3 2 6 0 2 6
""",
)
MMCV_OUTPUT = (
    (2, 4, 2, 4),
    """
-0.081347808 0.038773362 -0.82127762 -0.2869547 -0.23378491 -0.24112664 -0.1600166
-0.41218641 -0.05780616 -0.12298299 -0.037046101 -0.078899309 -0.13956165 -0.02006848
-0.10940295 -0.029343899 0.092841446 0.58250105 0.59277493 0.16774094 0.27070042
0.13422406 0.2617501 0.23416464 -0.061212178 -0.095613219 -0.20408826 0.080793433
0.00944228 0.03874819 0.084040649 0.040416289 -0.2110898 -0.13335688 -0.093150817
0.085120954 0.091217741 0.15976946 0.23994486 0.14350912 -0.36167958 -0.14891288
-0.64470863 -0.064670399 -0.28276974 -0.088476658 -0.46904767 0.20491874 -0.34877953
-0.35533834 -0.25225785 -0.46381891 -0.1420663 0.094677813 0.17088932 0.22580585
-0.38797081 -0.3991068 0.052764978 -0.46989647 0.32522714 -0.021635341 0.21604237
0.43466821
""",
)
MMCV_SCORES_GRAD = (
    (2, 2, 4, 2),
    """
0.04288036 -0.18217683 -0.78873926 0.7485497 -0.68669921 0.05346543 0.04288036
-0.18217683 -1.1407862 0.13533896 -0.069643907 -0.22948086 -1.1407862 0.13533896
-0.069643907 -0.22948086 -0.3363995 -2.2121811 -1.1589496 -2.7724311 -0.93876541
-1.3163853 -1.4385346 -1.0614843 -0.50484967 1.4143617 -0.47332114 0.6017133 -0.30974793
1.1995442 -0.50484967 1.4143617
""",
)
MMCV_POINTS_GRAD = (
    (2, 8, 2, 4),
    """
0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0.15585709 0.15585709 0.15585709 0.15585709 1.1893613
1.1893613 1.1893613 1.1893613 0 0 0 0 0 0 0 0 1.6530733 1.6530733 1.6530733 1.6530733
1.8130021 1.8130021 1.8130021 1.8130021 0 0 0 0 0 0 0 0 0.58863074 0.58863074 0.58863074
0.58863074 1.3727596 1.3727596 1.3727596 1.3727596 0.28462553 0.28462553 0.28462553
0.28462553 0.83785158 0.83785158 0.83785158 0.83785158 0.13817799 0.13817799 0.13817799
0.13817799 0.34856772 0.34856772 0.34856772 0.34856772 0.74051023 0.74051023 0.74051023
0.74051023 0.064384222 0.064384222 0.064384222 0.064384222 0.84919631 0.84919631
0.84919631 0.84919631 1.1301711 1.1301711 1.1301711 1.1301711 0.68873942 0.68873942
0.68873942 0.68873942 0.22089851 0.22089851 0.22089851 0.22089851 0 0 0 0 0 0 0 0 0 0 0
0 0 0 0 0 0.60583198 0.60583198 0.60583198 0.60583198 0.92364264 0.92364264 0.92364264
0.92364264 0.23089725 0.23089725 0.23089725 0.23089725 0.5568468 0.5568468 0.5568468
0.5568468
""",
)
MMCV_CENTERS_GRAD = (
    (2, 8, 2, 4),
    """
0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 -1.0493311 -1.0493311 -1.0493311 -1.0493311 -2.0301602
-2.0301602 -2.0301602 -2.0301602 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
-1.6328557 -1.6328557 -1.6328557 -1.6328557 -3.1828144 -3.1828144 -3.1828144 -3.1828144
0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
0 0 0 0 0 0 0 0 0 0 0 0 -1.5429721 -1.5429721 -1.5429721 -1.5429721 -1.6100934
-1.6100934 -1.6100934 -1.6100934 -1.7103812 -1.7103812 -1.7103812 -1.7103812 -1.6344175
-1.6344175 -1.6344175 -1.6344175
""",
)


def mmcv_tensor(data: tuple, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    shape, text = data
    return torch.tensor([float(v) for v in text.split()], dtype=torch.float64).to(dtype).view(shape)


def ref_forward(scores: list, points: list, centers: list, knn: list) -> list:
    """out[b][o][n][k] from the definition; 0 for a neighbour out of range."""
    b_n, n0, m_n, o_n = len(points), len(points[0]), len(points[0][0]), len(points[0][0][0])
    out = []
    for b in range(b_n):
        rows = [[[0.0] * len(knn[b][0]) for _ in knn[b]] for _ in range(o_n)]
        for n, row in enumerate(knn[b]):
            cn = row[0]
            for k, kn in enumerate(row):
                if not 0 <= kn < n0:
                    continue
                for o in range(o_n):
                    rows[o][n][k] = sum(
                        scores[b][n][k][m] * (points[b][kn][m][o] - centers[b][cn][m][o])
                        for m in range(m_n)
                    )
        out.append(rows)
    return out


def ref_backward(grad: list, scores: list, points: list, centers: list, knn: list) -> tuple:
    """mmcv's backward kernels as loops: (grad_scores, grad_points, grad_centers)."""
    b_n, n0, m_n, o_n = len(points), len(points[0]), len(points[0][0]), len(points[0][0][0])
    g_s = [[[[0.0] * m_n for _ in row] for row in knn[b]] for b in range(b_n)]
    g_p = [[[[0.0] * o_n for _ in range(m_n)] for _ in range(n0)] for _ in range(b_n)]
    g_c = [[[[0.0] * o_n for _ in range(m_n)] for _ in range(n0)] for _ in range(b_n)]
    for b in range(b_n):
        for n, row in enumerate(knn[b]):
            cn = row[0]
            for k, kn in enumerate(row):
                if not 0 <= kn < n0:
                    continue
                for m in range(m_n):
                    for o in range(o_n):
                        g = grad[b][o][n][k]
                        g_s[b][n][k][m] += (points[b][kn][m][o] - centers[b][cn][m][o]) * g
                        g_p[b][kn][m][o] += scores[b][n][k][m] * g
                        g_c[b][cn][m][o] -= scores[b][n][k][m] * g
    return g_s, g_p, g_c


def random_inputs(b: int = 2, n0: int = 6, npoint: int = 3, k: int = 4, m: int = 3, o: int = 5):
    gen = torch.Generator().manual_seed(b + 10 * n0 + 100 * npoint + 1000 * k)
    scores = torch.rand(b, npoint, k, m, generator=gen, dtype=torch.float64)
    points = torch.randn(b, n0, m, o, generator=gen, dtype=torch.float64)
    centers = torch.randn(b, n0, m, o, generator=gen, dtype=torch.float64)
    knn = torch.randint(0, n0, (b, npoint, k), generator=gen)
    return scores, points, centers, knn


def run(scores, points, centers, knn, device: str = "cpu", grad=None) -> tuple:
    leaves = [t.detach().to(device).requires_grad_() for t in (scores, points, centers)]
    out = assign_score_withk(*leaves, knn.to(device))
    out.backward(torch.ones_like(out) if grad is None else grad.to(device))
    return (out.detach().cpu(),) + tuple(t.grad.cpu() for t in leaves)


@pytest.mark.parametrize("device", DEVICES)
def test_mmcv_numbers(device: str) -> None:
    inputs = [mmcv_tensor(d) for d in (MMCV_SCORES, MMCV_POINTS, MMCV_CENTERS)]
    knn = mmcv_tensor(MMCV_KNN_IDX, torch.long)
    got = run(*inputs, knn, device)
    assert got[0].dtype == torch.float32
    for value, expected in zip(
        got, (MMCV_OUTPUT, MMCV_SCORES_GRAD, MMCV_POINTS_GRAD, MMCV_CENTERS_GRAD)
    ):
        torch.testing.assert_close(value, mmcv_tensor(expected), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_matches_reference(device: str) -> None:
    scores, points, centers, knn = random_inputs()
    knn[0, 1, 2], knn[1, 0, 3], knn[1, 2, 1] = -1, 6, 99  # out of range: 0, no gradient
    grad = torch.randn(2, 5, 3, 4, dtype=torch.float64)
    out, g_s, g_p, g_c = run(scores, points, centers, knn, device, grad)
    lists = [t.tolist() for t in (scores, points, centers, knn)]
    torch.testing.assert_close(out, torch.tensor(ref_forward(*lists), dtype=torch.float64))
    for got, expected in zip((g_s, g_p, g_c), ref_backward(grad.tolist(), *lists)):
        torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    assert out[0, :, 1, 2].eq(0).all() and out[1, :, 0, 3].eq(0).all()


def test_gradcheck() -> None:
    scores, points, centers, knn = random_inputs(b=2, n0=4, npoint=2, k=3, m=2, o=2)
    knn[1, 1, 2] = -1
    args = tuple(t.requires_grad_() for t in (scores, points, centers))
    assert torch.autograd.gradcheck(lambda s, p, c: assign_score_withk(s, p, c, knn), args)


def test_aggregate_is_ignored_as_by_mmcv() -> None:
    scores, points, centers, knn = random_inputs()
    outs = [assign_score_withk(scores, points, centers, knn, agg) for agg in ("sum", "avg", "max")]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert outs[0].shape == (2, 5, 3, 4)


def test_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    scores, points, centers, knn = random_inputs(npoint=7)
    full = run(scores, points, centers, knn)
    monkeypatch.setattr(sys.modules["mmpar.compat.ops.assign_score_withk"], "_CHUNK_ELEMENTS", 1)
    for got, expected in zip(run(scores, points, centers, knn), full):
        torch.testing.assert_close(got, expected)


def test_rows_with_no_neighbour_in_range() -> None:
    scores, points, centers, knn = random_inputs()
    knn[0, 2] = -1
    out, g_s, _, _ = run(scores, points, centers, knn)
    assert not out[0, :, 2].any() and not g_s[0, 2].any()


def test_non_finite_out_of_range_neighbours_give_exact_zeros() -> None:
    scores, points, centers, knn = random_inputs()
    scores[0, 0, 3] = float("inf")
    knn[0, 0, 3] = -1
    out, g_s, g_p, g_c = run(scores, points, centers, knn)
    assert not out[0, :, 0, 3].any()
    assert all(torch.isfinite(t).all() for t in (out, g_s, g_p, g_c))


@pytest.mark.parametrize(
    "b, n0, npoint, k, m, o",
    [
        (0, 3, 2, 2, 2, 2),
        (2, 3, 0, 2, 2, 2),
        (2, 3, 2, 0, 2, 2),
        (2, 3, 2, 2, 0, 2),
        (2, 3, 2, 2, 2, 0),
    ],
)
def test_empty(b: int, n0: int, npoint: int, k: int, m: int, o: int) -> None:
    scores, points, centers, knn = random_inputs(b, n0, npoint, k, m, o)
    out, g_s, g_p, g_c = run(scores, points, centers, knn)
    assert out.shape == (b, o, npoint, k) and not out.any()
    assert g_s.shape == scores.shape and g_p.shape == points.shape and g_c.shape == centers.shape


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half(dtype: torch.dtype) -> None:
    scores, points, centers, knn = (
        t.to(dtype) if t.is_floating_point() else t for t in random_inputs()
    )
    out, g_s, g_p, _ = run(scores, points, centers, knn)
    assert out.dtype == g_s.dtype == g_p.dtype == dtype
    ref = run(scores.float(), points.float(), centers.float(), knn)
    torch.testing.assert_close(out, ref[0].to(dtype))


def test_bad_input() -> None:
    scores, points, centers, knn = random_inputs()
    with pytest.raises(ValueError, match=r"assign_score_withk: aggregate must be one of"):
        assign_score_withk(scores, points, centers, knn, "mean")
    with pytest.raises(TypeError, match="knn_idx must be an integer tensor, found torch.float64"):
        assign_score_withk(scores, points, centers, knn.double())
    with pytest.raises(ValueError, match=r"knn_idx must have shape \(B, npoint, K\)"):
        assign_score_withk(scores, points, centers, knn[:, :2])
    with pytest.raises(ValueError, match="point_features and center_features must have shape"):
        assign_score_withk(scores, points, centers[:, :, :2], knn)
    with pytest.raises(TypeError, match="must have one dtype"):
        assign_score_withk(scores, points.float(), centers.float(), knn)
    with pytest.raises(TypeError, match="point_features must be a floating-point tensor"):
        assign_score_withk(scores, points.long(), centers, knn)
    knn[0, 1, 0] = -1
    with pytest.raises(ValueError, match=r"knn_idx\[..., 0\] \(each row's center\) must lie in"):
        assign_score_withk(scores, points, centers, knn)
