"""mmpar.compat.patch_mmcv() and ``python -m mmpar.compat.run``, against the real mmcv 1.x.

Patching mutates ``sys.modules``, so every check runs in a fresh interpreter:
the code below each test is a script run with this checkout on ``PYTHONPATH``
that prints ``OK`` last; the test asserts its exit code and that line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.compat._mmcv_env import child_env, requires_mmcv, requires_mmdet

pytestmark = requires_mmcv

TIMEOUT = 120

PRELUDE = """
import sys, warnings
from tests.compat._mmcv_env import install_stand_ins
install_stand_ins()
import mmpar
"""

# The public names of mmcv 1.7.2's mmcv.parallel that mmpar provides.
NAMES = [
    "DataContainer",
    "collate",
    "scatter",
    "scatter_kwargs",
    "MMDataParallel",
    "MMDistributedDataParallel",
    "is_module_wrapper",
]


def run_python(args, cwd=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=child_env(PYTHONWARNINGS="default"),
        cwd=cwd,
    )
    return proc


def check(code: str) -> str:
    proc = run_python(["-c", PRELUDE + textwrap.dedent(code) + "\nprint('OK')\n"])
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("OK"), (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    )
    return proc.stdout


def test_package_names_are_mmpar_objects() -> None:
    check(f"""
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        loaded = sys.modules.get("mmcv.parallel")
        assert loaded is None or loaded.DataContainer is mmpar.DataContainer
        import mmcv.parallel
        for name in {NAMES!r}:
            assert getattr(mmcv.parallel, name) is getattr(mmpar, name), name
        from mmcv.parallel import DataContainer, collate, MMDistributedDataParallel
        assert (DataContainer, collate, MMDistributedDataParallel) == (
            mmpar.DataContainer, mmpar.collate, mmpar.MMDistributedDataParallel)
        import mmcv
        assert mmcv.parallel is sys.modules["mmcv.parallel"]
    """)


def test_submodule_imports_give_mmpar_objects() -> None:
    # The submodule paths mmcv and mmdet themselves import from (mmcv.device,
    # mmcv.runner's pavi hook, mmdet) and the rest of mmcv 1.7.2's layout.
    check("""
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        from mmcv.parallel.data_container import DataContainer
        from mmcv.parallel.collate import collate
        from mmcv.parallel.scatter_gather import scatter, scatter_kwargs
        from mmcv.parallel.data_parallel import MMDataParallel
        from mmcv.parallel.distributed import MMDistributedDataParallel
        from mmcv.parallel.utils import is_module_wrapper
        got = (DataContainer, collate, scatter, scatter_kwargs, MMDataParallel,
               MMDistributedDataParallel, is_module_wrapper)
        want = (mmpar.DataContainer, mmpar.collate, mmpar.scatter, mmpar.scatter_kwargs,
                mmpar.MMDataParallel,
                mmpar.MMDistributedDataParallel, mmpar.is_module_wrapper)
        for g, w in zip(got, want):
            assert g is w, (g, w)
        import mmcv.parallel.data_container as dc_module
        assert dc_module.DataContainer is mmpar.DataContainer
    """)


def test_mmcv_runner_imports_and_uses_mmpar() -> None:
    check("""
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        import mmcv.runner
        from mmcv.runner import EpochBasedRunner, DistSamplerSeedHook, save_checkpoint
        import mmcv.runner.checkpoint as ckpt
        # mmcv.runner bound mmcv.parallel's names at import: they are mmpar's.
        assert ckpt.is_module_wrapper is mmpar.is_module_wrapper
        import mmcv.device.scatter_gather as device_sg
        assert device_sg.DataContainer is mmpar.DataContainer
    """)


@requires_mmdet
def test_mmdet_pipeline_emits_mmpar_containers(tmp_path) -> None:
    check(f"""
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        from mmdet.datasets import CocoDataset, build_dataloader
        from mmdet.datasets.pipelines import formatting
        assert formatting.DC is mmpar.DataContainer
        from tests.compat._mmcv_env import write_small_coco, mmdet_train_pipeline
        ann, prefix, classes = write_small_coco({str(tmp_path)!r})
        ds = CocoDataset(ann, mmdet_train_pipeline(), img_prefix=prefix, classes=classes)
        assert all(type(v) is mmpar.DataContainer for v in ds[0].values())
        loader = build_dataloader(ds, 2, 0, dist=False, seed=0)
        batch = next(iter(loader))
        assert type(batch["img"]) is mmpar.DataContainer and batch["img"].data[0].shape[0] == 2
    """)


def test_patching_twice_is_a_no_op() -> None:
    check(f"""
        from mmpar.compat import patch_mmcv
        patch_mmcv()
        import mmcv.parallel
        first = dict(sys.modules)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            patch_mmcv()
        assert not [w for w in caught if "mmcv" in str(w.message)], [str(w.message) for w in caught]
        assert sys.modules["mmcv.parallel"] is first["mmcv.parallel"]
        for name in {NAMES!r}:
            assert getattr(sys.modules["mmcv.parallel"], name) is getattr(mmpar, name), name
    """)


def test_patching_after_a_bare_import_mmcv_does_not_warn() -> None:
    # import mmcv does not import mmcv.parallel: nothing to warn about.
    check("""
        import mmcv
        assert "mmcv.parallel" not in sys.modules
        from mmpar.compat import patch_mmcv
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            patch_mmcv()
        messages = [str(w.message) for w in caught]
        assert not [m for m in messages if "mmcv.parallel" in m], messages
        from mmcv.parallel import DataContainer
        assert DataContainer is mmpar.DataContainer
    """)


def test_patching_after_mmcv_parallel_was_imported_warns_and_patches_what_it_can() -> None:
    check(f"""
        import mmcv.parallel
        import mmcv.parallel.data_container
        real_dc = mmcv.parallel.DataContainer
        assert real_dc is not mmpar.DataContainer
        from mmpar.compat import patch_mmcv
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            patch_mmcv()
        named = [w for w in caught if issubclass(w.category, (UserWarning, RuntimeWarning))
                 and "mmcv.parallel" in str(w.message)]
        assert named, [(w.category.__name__, str(w.message)) for w in caught]
        # Imports from now on see mmpar's objects.
        import mmcv.parallel
        from mmcv.parallel import DataContainer, collate
        from mmcv.parallel.data_container import DataContainer as DC2
        assert DataContainer is mmpar.DataContainer and DC2 is mmpar.DataContainer
        assert collate is mmpar.collate
        for name in {NAMES!r}:
            assert getattr(sys.modules["mmcv.parallel"], name) is getattr(mmpar, name), name
        import mmcv.runner
        import mmcv.runner.checkpoint as ckpt
        assert ckpt.is_module_wrapper is mmpar.is_module_wrapper
    """)


SCRIPT = """\
import sys
from tests.compat._mmcv_env import install_stand_ins
install_stand_ins()
import mmpar
import mmcv.parallel
from mmcv.parallel import DataContainer
assert DataContainer is mmpar.DataContainer and mmcv.parallel.collate is mmpar.collate
print("name", __name__)
print("argv", sys.argv[1:])
sys.exit(int(sys.argv[-1]))
"""


@pytest.mark.parametrize("code", [0, 3])
def test_run_module_runs_a_script_patched(tmp_path: Path, code: int) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    proc = run_python(
        ["-m", "mmpar.compat.run", str(script), "--flag", "x y", str(code)], cwd=tmp_path
    )
    assert proc.returncode == code, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    assert "name __main__" in proc.stdout
    assert f"argv ['--flag', 'x y', '{code}']" in proc.stdout


SPAWNING_SCRIPT = """
import json, multiprocessing, sys
from tests.compat._mmcv_env import install_stand_ins
install_stand_ins()
import mmcv.parallel

TOP_LEVEL_COLLATE = mmcv.parallel.collate.__module__  # run again in the child


def report(path):
    from mmpar.compat import is_patched
    with open(path, "w") as f:
        json.dump(dict(name=__name__, patched=is_patched(), top=TOP_LEVEL_COLLATE,
                       collate=mmcv.parallel.collate.__module__), f)


if __name__ == "__main__":
    child = multiprocessing.get_context(sys.argv[1]).Process(target=report, args=(sys.argv[2],))
    child.start()
    child.join(60)
    sys.exit(child.exitcode)
"""


@pytest.mark.parametrize("method", ["spawn"])  # forkserver children are prepared alike
def test_run_module_patches_the_scripts_spawned_children(tmp_path: Path, method: str) -> None:
    # Such a child runs the script's top level again (as __mp_main__): patched first,
    # as mmrotate's mAP pool (spawn) and spawned DataLoader workers need.
    script = tmp_path / "spawning_script.py"
    script.write_text(SPAWNING_SCRIPT)
    out = tmp_path / "child.json"
    proc = run_python(["-m", "mmpar.compat.run", str(script), method, str(out)], cwd=tmp_path)
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    report = json.loads(out.read_text())
    assert report == dict(
        name="__mp_main__", patched=True, top="mmpar.collate", collate="mmpar.collate"
    )
