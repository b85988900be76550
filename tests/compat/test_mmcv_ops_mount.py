"""Whose ``mmcv.ops`` a patched process gets, and how a missing op says so.

Each case runs in a fresh interpreter: what it checks is the state of
``sys.modules`` and of mmcv's registries from the first import on.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.compat._mmcv_env import (
    REPO_ROOT,
    child_env,
    requires_mmcv,
    requires_mmpar_ops,
    requires_torchvision,
)

pytestmark = [requires_mmcv, requires_mmpar_ops, requires_torchvision]

_ENV_VARS = ("MMPAR_MMCV_OPS", "MMPAR_MMCV_OPS_ANNOUNCED", "RANK", "SLURM_PROCID")


def _run(code: str, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    base = child_env(**env)
    for name in _ENV_VARS:
        if name not in env:
            base.pop(name, None)
    return subprocess.run(
        [sys.executable, *args] if args else [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=base,
        cwd=REPO_ROOT,
    )


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


def _announcements(proc: subprocess.CompletedProcess) -> list:
    return [line for line in proc.stderr.splitlines() if line.startswith("mmpar: mmcv.ops are")]


def test_without_compiled_ops_mmcv_ops_are_mmpars_under_mmcvs_names() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        import mmcv.ops
        import sys
        nms_module = sys.modules["mmcv.ops.nms"]
        from mmcv.ops import batched_nms, nms, RoIAlign
        from mmcv.ops.roi_align import roi_align
        from mmpar.compat.ops import MODULES
        ours, ours_align = MODULES["nms"], MODULES["roi_align"]
        assert nms is ours.nms and batched_nms is ours.batched_nms, nms
        assert nms_module.batched_nms is ours.batched_nms
        assert mmcv.ops.nms is ours.nms  # the function wins the package attribute, as in mmcv
        assert RoIAlign is ours_align.RoIAlign and roi_align is ours_align.roi_align
        from mmcv.ops import Conv2d
        from mmcv.cnn.bricks.wrappers import Conv2d as mmcv_conv
        assert Conv2d is mmcv_conv
        from mmpar.compat.mmcv_ops import ops_in_use
        print(ops_in_use())
        """
    )
    assert _ok(proc).split() == ["mmpar"]
    (line,) = _announcements(proc)
    assert "mmpar's" in line and "mmcv._ext" in line, line


def test_ops_are_registered_in_mmcvs_registries_as_mmcv_registers_its_own() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        import mmcv.ops
        from mmcv.cnn import build_conv_layer, build_norm_layer
        from mmpar.compat.ops import MODULES
        deform_conv, sync_bn = MODULES["deform_conv"], MODULES["sync_bn"]
        modulated_deform_conv = MODULES["modulated_deform_conv"]
        dcn = build_conv_layer(dict(type="DCN", deform_groups=1), 4, 8, 3, padding=1)
        assert type(dcn) is deform_conv.DeformConv2dPack, type(dcn)
        dcn2 = build_conv_layer(dict(type="DCNv2", deform_groups=1), 4, 8, 3, padding=1)
        assert type(dcn2) is modulated_deform_conv.ModulatedDeformConv2dPack, type(dcn2)
        _, bn = build_norm_layer(dict(type="MMSyncBN"), 8)
        assert type(bn) is sync_bn.SyncBatchNorm, type(bn)
        from mmcv.cnn import build_upsample_layer, build_plugin_layer
        from mmcv.cnn.bricks.registry import ATTENTION, CONV_LAYERS
        up = build_upsample_layer(dict(type="carafe", channels=8, scale_factor=2))
        assert type(up) is MODULES["carafe"].CARAFEPack, type(up)
        _, cca = build_plugin_layer(dict(type="CrissCrossAttention", in_channels=8))
        assert type(cca) is MODULES["cc_attention"].CrissCrossAttention, type(cca)
        assert ATTENTION.get("MultiScaleDeformableAttention") is (
            MODULES["multi_scale_deform_attn"].MultiScaleDeformableAttention)
        assert CONV_LAYERS.get("SAC") is MODULES["saconv"].SAConv2d
        sparse_conv = MODULES["sparse_conv"]
        for name in ("SubMConv2d", "SubMConv3d", "SubMConv4d", "SparseConv2d", "SparseConv3d",
                     "SparseConv4d", "SparseConvTranspose2d", "SparseConvTranspose3d",
                     "SparseInverseConv2d", "SparseInverseConv3d"):  # fmt: skip
            assert CONV_LAYERS.get(name) is getattr(sparse_conv, name), name
        subm = build_conv_layer(dict(type="SubMConv3d", indice_key="subm1"), 4, 16, 3)
        assert type(subm) is sparse_conv.SubMConv3d and subm.weight.shape == (3, 3, 3, 4, 16)
        print("ok")
        """
    )
    assert _ok(proc).split() == ["ok"]


@pytest.mark.parametrize(
    "statement, missing",
    [
        ("from mmcv.ops.roi_align import RoIAlignFunction", "mmcv.ops.roi_align.RoIAlignFunction"),
        ("from mmcv.ops.nms import NMSop", "mmcv.ops.nms.NMSop"),
        ("import mmcv._ext; mmcv._ext.bev_pool_forward", "mmcv._ext.bev_pool_forward"),
    ],
)
def test_an_op_mmpar_does_not_supply_is_one_line_that_names_it_and_what_to_do(
    statement: str, missing: str
) -> None:
    proc = _run(
        f"""
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        from mmpar.compat.mmcv_ops import MissingOpError
        try:
            {statement}
        except MissingOpError as err:
            print(str(err))
        """
    )
    (message,) = _ok(proc).splitlines()
    assert message.startswith(f"{missing} is not one of mmpar's ops"), message
    assert "install an mmcv-full" in message


def test_a_name_mmcv_does_not_have_either_is_an_ordinary_import_error() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        from mmpar.compat.mmcv_ops import MissingOpError
        import mmcv.ops
        assert not hasattr(mmcv.ops, "no_such_op")
        try:
            import mmcv.ops.no_such_op
        except ModuleNotFoundError as err:
            assert not isinstance(err, MissingOpError)
            print(err.name)
        """
    )
    assert _ok(proc).split() == ["mmcv.ops.no_such_op"]


def test_ops_mmcv_keeps_mmcvs_own_even_where_they_do_not_load() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        patch_mmcv(ops="mmcv")
        try:
            import mmcv.ops
        except ImportError as err:
            print(type(err).__name__, err.name)
        """
    )
    assert _ok(proc).split() == ["ModuleNotFoundError", "mmcv._ext"]
    (line,) = _announcements(proc)
    assert "mmcv-full's own" in line and "ops='mmcv'" in line, line


_FAKE_EXT = """
import sys, types
sys.modules["mmcv._ext"] = types.ModuleType("mmcv._ext")  # compiled ops that load
"""


def test_where_mmcv_full_loads_its_ops_stay() -> None:
    proc = _run(
        _FAKE_EXT
        + """
from mmpar.compat import patch_mmcv
from mmpar.compat.mmcv_ops import ops_in_use
patch_mmcv()
assert "mmcv.ops" not in sys.modules
assert not any(type(f).__module__ == "mmpar.compat.mmcv_ops" for f in sys.meta_path)
print(ops_in_use())
"""
    )
    assert _ok(proc).split() == ["mmcv"]
    (line,) = _announcements(proc)
    assert "mmcv-full's own" in line and "compiled ops load" in line, line


def test_ops_mmpar_replaces_a_working_mmcv_full() -> None:
    proc = _run(
        _FAKE_EXT
        + """
from mmpar.compat import patch_mmcv
patch_mmcv(ops="mmpar")
from mmcv.ops import nms
import mmpar.compat.ops
assert nms is mmpar.compat.ops.nms
print("ok")
"""
    )
    assert _ok(proc).split() == ["ok"]
    (line,) = _announcements(proc)
    assert "mmpar's" in line and "ops='mmpar'" in line, line


def test_without_torchvision_importing_an_op_says_how_to_install_it() -> None:
    proc = _run(
        """
        import sys
        sys.modules["torchvision"] = None  # not installed
        from mmpar.compat import patch_mmcv
        patch_mmcv(ops="mmpar")
        try:
            from mmcv.ops import nms
        except ImportError as err:
            print(err)
        """
    )
    (message,) = _ok(proc).splitlines()
    assert 'pip install -e ".[mmcv-ops]"' in message, message


def test_an_unknown_ops_mode_is_a_value_error_naming_the_choices() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        try:
            patch_mmcv(ops="mmdet")
        except ValueError as err:
            print(err)
        """
    )
    assert _ok(proc).strip() == "ops: expected one of auto, mmcv, mmpar, got 'mmdet'"


def test_the_choice_and_the_one_line_reach_child_processes_once(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import subprocess, sys
            import mmcv.ops
            from mmpar.compat.mmcv_ops import ops_in_use
            print("parent", ops_in_use(), mmcv.ops.nms.__module__)
            child = "from mmpar.compat import patch_mmcv; patch_mmcv(); " \\
                "from mmpar.compat.mmcv_ops import ops_in_use; print('child', ops_in_use())"
            subprocess.run([sys.executable, "-c", child], check=True)
            """
        )
    )
    proc = _run("", "-m", "mmpar.compat.run", "--ops=mmpar", str(script))
    assert _ok(proc).splitlines() == ["parent mmpar mmpar.compat.ops.nms", "child mmpar"]
    assert len(_announcements(proc)) == 1, proc.stderr


def test_run_refuses_a_bad_ops_in_one_error_line(tmp_path: Path) -> None:
    script = tmp_path / "noop.py"
    script.write_text("")
    proc = _run("", "-m", "mmpar.compat.run", "--ops", "fast", str(script))
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --ops: expected one of auto, mmcv, mmpar, got 'fast'"], proc.stderr


def test_patching_after_mmcv_ops_was_imported_warns_and_later_imports_get_mmpars() -> None:
    proc = _run(
        """
        import sys, types, warnings
        import mmcv
        early = types.ModuleType("mmcv.ops")  # what an earlier import left behind
        sys.modules["mmcv.ops"] = early
        from mmpar.compat import patch_mmcv
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            patch_mmcv()
        from mmcv.ops import nms
        import mmpar.compat.ops
        assert nms is mmpar.compat.ops.nms and sys.modules["mmcv.ops"] is not early
        print([str(w.message).split(";")[0] for w in caught if "before mmpar" in str(w.message)])
        """
    )
    out = _ok(proc)
    assert "mmcv.ops had been imported before mmpar's ops were put in place" in out, out


def test_patching_twice_keeps_mmcv_ops() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        import mmcv.ops
        first = mmcv.ops
        patch_mmcv()
        import mmcv.ops
        assert mmcv.ops is first and callable(mmcv.ops.nms)
        print("ok")
        """
    )
    assert _ok(proc).split() == ["ok"]
    assert len(_announcements(proc)) == 1, proc.stderr


def test_a_rank_other_than_0_does_not_announce() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        from mmcv.ops import nms
        print("ok")
        """,
        RANK="1",
    )
    assert _ok(proc).split() == ["ok"]
    assert _announcements(proc) == [], proc.stderr


def test_choosing_mmcv_after_mmpar_takes_mmpars_finder_away() -> None:
    proc = _run(
        """
        import warnings
        from mmpar.compat import patch_mmcv
        from mmpar.compat.mmcv_ops import supply_mmcv_ops, ops_in_use
        patch_mmcv(ops="mmpar")
        import mmcv.ops
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            supply_mmcv_ops("mmcv")
        assert any("mmcv's own ops were chosen" in str(w.message) for w in caught)
        try:
            import mmcv.ops
        except ModuleNotFoundError as err:
            print(ops_in_use(), err.name)
        """
    )
    assert _ok(proc).split() == ["mmcv", "mmcv._ext"]


def test_a_bad_mode_in_the_environment_names_the_variable() -> None:
    proc = _run(
        """
        from mmpar.compat import patch_mmcv
        try:
            patch_mmcv()
        except ValueError as err:
            print(err)
        """,
        MMPAR_MMCV_OPS="fast",
    )
    assert _ok(proc).strip() == ("MMPAR_MMCV_OPS: expected one of auto, mmcv, mmpar, got 'fast'")


def test_every_name_and_module_of_mmcvs_ops_is_supplied() -> None:
    """mmcv's own ``mmcv/ops/__init__.py`` (installed without its compiled ops) against
    mmpar's: every name of its ``__all__`` (the MLU variants aside) and every module."""
    proc = _run(
        """
        import ast, importlib.util, pathlib
        mmcv_dir = importlib.util.find_spec("mmcv").submodule_search_locations[0]
        ops_dir = pathlib.Path(mmcv_dir) / "ops"
        tree = ast.parse((ops_dir / "__init__.py").read_text())
        names = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and getattr(n.targets[0], "id", "") == "__all__")
        modules = sorted(p.stem for p in ops_dir.glob("*.py") if p.stem != "__init__")
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        import importlib, mmcv.ops
        missing = [n for n in names if not hasattr(mmcv.ops, n)]
        for m in modules:
            importlib.import_module("mmcv.ops." + m)
        print(len(names), len(modules), missing)
        """
    )
    count, modules, missing = _ok(proc).split(" ", 2)
    assert missing.strip() == "[]" and int(count) >= 117 and int(modules) >= 59
