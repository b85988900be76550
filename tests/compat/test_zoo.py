"""tools/zoo.py: the model zoos of mmdet, mmseg, mmrotate, mmocr, mmedit, mmaction2 (one
training step, one test batch per config) and of mmpose, mmcls, mmtrack (built only).

The fast tests check the tool's refusals (one ``error:`` line, exit 2), how it
selects and tables model directories at any depth, and its mends of the
codebases' own CPU bugs (``tools/zoo/fixes.py``). The slow ones run a few configs
of each codebase, chosen to cover mmpar's ops that codebase uses; mmdet's zoo has
its own test (test_mmdet_zoo.py).
"""

from __future__ import annotations

import importlib.util
import json
import runpy
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.compat._mmcv_env import MMCV_170_DIR, REPO_ROOT
from tests.compat.test_mmdet_zoo import config_lines, error_line, write_configs
from tests.compat.test_mmdet_zoo import run_tool as mmdet_run_tool

TOOL = REPO_ROOT / "tools" / "zoo.py"
ALIAS = REPO_ROOT / "tools" / "mmdet_zoo.py"

#: codebase -> (its import name, the configs run in CI, whether it needs mmcv 1.7.0), the
#: longest runs first. Each config must pass; the comment says which of mmpar's ops it runs.
SUBSETS: Dict[str, Tuple[str, List[str], bool]] = {
    # upfirdn2d, fused_bias_leakyrelu (StyleGAN2's blocks)
    "mmedit": ("mmedit", ["restorers/glean/glean_cat_8x.py"], False),
    "mmrotate": (
        "mmrotate",
        [
            # RoIAlignRotated, box_iou_rotated, nms_rotated
            "oriented_rcnn/oriented_rcnn_r50_fpn_1x_dota_le90.py",
            # active_rotated_filter (ORConv2d), deform_conv (AlignConv)
            "s2anet/s2anet_r50_fpn_1x_dota_le135.py",
            "r3det/r3det_r50_fpn_1x_dota_oc.py",  # rotated_feature_align
            # convex_iou, convex_giou, min_area_polygons, points_in_polygons
            "oriented_reppoints/oriented_reppoints_r50_fpn_1x_dota_le135.py",
            "rotated_fcos/rotated_fcos_r50_fpn_1x_dota_le90.py",  # diff_iou_rotated_2d
        ],
        False,
    ),
    "mmocr": (
        "mmocr",
        [
            "textdet/panet/panet_r18_fpem_ffm_600e_ctw1500.py",  # pixel_group
            "textdet/psenet/psenet_r50_fpnf_600e_ctw1500.py",  # contour_expand
            "textrecog/crnn/crnn_academic_dataset.py",
        ],
        False,
    ),
    "mmaction2": (
        "mmaction",
        ["recognition/tin/tin_r50_1x1x8_40e_sthv1_rgb.py"],
        True,
    ),  # tin_shift
    "mmseg": ("mmseg", ["ccnet/ccnet_r50-d8_512x1024_40k_cityscapes.py"], False),  # cc_attention
    "mmtrack": ("mmtrack", ["sot/siamese_rpn/siamese_rpn_r50_20e_lasot.py"], False),
    "mmpose": (
        "mmpose",
        ["body/2d_kpt_sview_rgb_img/topdown_heatmap/coco/res50_coco_256x192.py"],
        True,
    ),
    "mmcls": ("mmcls", ["resnet/resnet18_8xb32_in1k.py"], False),
}


def run_tool(*args: str, tool: Path = TOOL, timeout: float = 120, prefix: str = ""):
    """tools/zoo.py (or ``tool``) as a user runs it: test_mmdet_zoo's ``run_tool``."""
    return mmdet_run_tool(*args, tool=tool, timeout=timeout, prefix=prefix)


def installed(module: str, old_mmcv: bool = False) -> bool:
    """Whether ``module`` imports here (or, ``old_mmcv``, from the folder of mmcv 1.7.0)."""
    found = importlib.util.find_spec(module) is not None
    return found or (old_mmcv and (MMCV_170_DIR / module / "__init__.py").is_file())


# --------------------------------------------------------------------------- user errors


def test_an_unknown_codebase_is_refused() -> None:
    proc = run_tool("--codebase", "mmnothing")
    assert proc.returncode == 2 and "invalid choice: 'mmnothing'" in proc.stderr, proc.stderr


def test_a_pythonpath_that_is_no_folder_is_one_error_line(tmp_path: Path) -> None:
    root = write_configs(tmp_path / "configs", {"a/x.py": "x = 1\n"})
    missing = tmp_path / "missing"
    proc = run_tool("--configs-root", str(root), "--pythonpath", str(missing))
    error_line(proc, "--pythonpath", str(missing))


def test_a_codebase_that_is_not_installed_is_one_error_line() -> None:
    proc = run_tool("--codebase", "mmocr", prefix="import sys; sys.modules['mmocr'] = None")
    error_line(proc, "mmocr is not installed", "pip install 'mmocr<1'")


def test_the_mmdet_alias_refuses_another_codebase() -> None:
    error_line(run_tool("--codebase", "mmseg", tool=ALIAS), "--codebase", "tools/zoo.py")


def test_a_codebase_that_does_not_import_says_how_to_mend_it(tmp_path: Path) -> None:
    # An mmaction package that refuses the mmcv it finds, as mmaction2 0.24 refuses 1.7.2,
    # found through --pythonpath (with its configs).
    package = write_configs(tmp_path / "site", {"mmaction/.mim/configs/recognition/tin/a.py": ""})
    (package / "mmaction" / "__init__.py").write_text(
        "raise AssertionError('MMCV==1.7.2 is used but incompatible. "
        "Please install mmcv>=1.3.6, <=1.7.0.')\n"
    )
    proc = run_tool("--codebase", "mmaction2", "--pythonpath", str(package), timeout=300)
    # mmpar's line on whose ops serve mmcv.ops comes first: the ops were mounted.
    proc.stderr = "\n".join(x for x in proc.stderr.splitlines() if not x.startswith("mmpar: "))
    error_line(proc, "mmaction2's models do not import", "incompatible", "--pythonpath DIR")


# --------------------------------------------------------------------------- model directories


def test_nested_model_directories_are_tabled_by_their_path(tmp_path: Path) -> None:
    results = [
        dict(config="textdet/dbnet/a.py", dir="textdet/dbnet", status="PASS", times={}),
        dict(config="textdet/dbnet/b.py", dir="textdet/dbnet", status="FAIL", stage="train",
             error="ValueError: v"),
        dict(config="textrecog/crnn/c.py", dir="textrecog/crnn", status="SKIP",
             reason="needs the file data/dict.txt", times={}),
    ]  # fmt: skip
    path = tmp_path / "zoo.json"
    path.write_text(json.dumps(dict(results=results)))
    proc = run_tool("--from-json", str(path), "--by-dir")
    assert proc.returncode == 1, proc.stderr
    assert "| textdet/dbnet | 1/2 | `b.py`: train: ValueError: v |" in proc.stdout
    assert "| textrecog/crnn | 0/0 | 1 skipped (needs the file data/dict.txt) |" in proc.stdout


@pytest.mark.skipif(not installed("mmcls"), reason="needs mmcls 0.x (the lightest to import)")
def test_dirs_selects_model_directories_at_any_depth(tmp_path: Path) -> None:
    schedule = "runner = dict(type='EpochBasedRunner', max_epochs=1)\n"
    root = write_configs(
        tmp_path / "configs",
        {
            "textdet/dbnet/a.py": schedule,
            "textdet/panet/b.py": schedule,
            "textdet/_base_/c.py": schedule,
            "textrecog/crnn/d.py": schedule,
            "_base_/e.py": schedule,
        },
    )
    select = ("--codebase", "mmcls", "--configs-root", str(root))
    error_line(run_tool(*select, "--dirs", "textdet/nope"), "--dirs", "'textdet/nope'")
    error_line(run_tool(*select, "--configs", "textdet/x.py"), "--configs", "'textdet/x.py'")
    proc = run_tool(*select, "--dirs", "textdet", "--by-dir", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(config_lines(proc.stdout)) == ["textdet/dbnet/a.py", "textdet/panet/b.py"]
    assert "| textdet/panet | 0/0 | 1 skipped (no model" in proc.stdout


# --------------------------------------------------------------------------- fixes


@pytest.fixture(scope="module")
def zoo():
    """The tool's package (``mmpar_zoo``), as tools/zoo.py loads it."""
    return runpy.run_path(str(TOOL))["zoo"]


def test_a_cuda_default_and_a_device_given_as_dtype_are_mended(zoo) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("the mend changes nothing where a GPU is visible")
    fixes = importlib.import_module("mmpar_zoo.fixes")

    def grid_priors(self, sizes, dtype=torch.float32, device="cuda"):
        return dtype, device

    mended = fixes._on_this_machine(grid_priors)
    assert mended(None, [1]) == (torch.float32, "cpu")
    assert mended(None, [1], torch.device("cpu")) == (torch.float32, torch.device("cpu"))
    assert mended(None, [1], torch.float16, "cuda:0") == (torch.float16, "cpu")
    assert mended(None, [1], device="meta") == (torch.float32, "meta")


# --------------------------------------------------------------------------- the subsets


def _run_subset(codebase: str, folder: Path) -> Tuple[subprocess.CompletedProcess, Path]:
    _, configs, old_mmcv = SUBSETS[codebase]
    out = folder / f"{codebase}.json"
    args = ["--codebase", codebase, "--jobs", "2", "--json", str(out)]
    args += ["--configs", ",".join(configs)]
    if old_mmcv:
        args += ["--pythonpath", str(MMCV_170_DIR)]
    return run_tool(*args, timeout=900), out


@pytest.fixture(scope="module")
def subset_runs(request, tmp_path_factory) -> Dict[str, Tuple[subprocess.CompletedProcess, Path]]:
    """The selected codebases' subsets, two runs at a time (one's imports overlap the
    other's configs), the longest first: codebase -> (the run, its JSON file)."""
    folder = tmp_path_factory.mktemp("zoo")
    selected = {
        item.callspec.params["codebase"]
        for item in request.session.items
        if item.originalname == "test_a_subset_of_each_codebase_trains_and_tests"
    }
    there = [
        c for c in SUBSETS if c in selected and installed(SUBSETS[c][0], SUBSETS[c][2])
    ]  # SUBSETS' order: the longest first
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {c: pool.submit(_run_subset, c, folder) for c in there}
        return {c: run.result() for c, run in runs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("codebase", sorted(SUBSETS))
def test_a_subset_of_each_codebase_trains_and_tests(codebase: str, subset_runs) -> None:
    module, configs, old_mmcv = SUBSETS[codebase]
    if codebase not in subset_runs:
        pytest.skip(f"needs {codebase}" + (f" in {MMCV_170_DIR}" if old_mmcv else ""))
    proc, out = subset_runs[codebase]
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    results = json.loads(out.read_text())["results"]
    assert sorted(r["config"] for r in results) == sorted(configs)
    assert all(r["status"] == "PASS" for r in results), proc.stdout[-3000:]
