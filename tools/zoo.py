#!/usr/bin/env python3
"""Run every config of an OpenMMLab 1.x codebase's model zoo: one training step, one test batch.

``--codebase`` chooses the zoo: mmdet (the default), mmseg, mmrotate, mmocr,
mmedit and mmaction2 run; mmpose, mmcls and mmtrack only build. For each config
(``<model dir>/<name>.py`` under ``--configs-root``, at any depth, ``_base_``
excluded) the tool builds the model without pretrained weights (nothing is
downloaded), makes a small random batch of what the model takes (boxes, masks
and proposals for mmdet; rotated boxes for mmrotate; segmentation maps for
mmseg; text kernels, polygons or strings for mmocr; image pairs for mmedit; clips
for mmaction2), batches it with ``mmpar.collate`` as the codebase's pipelines
emit it, runs one training step through ``mmpar.MMDataParallel`` on the CPU
(forward, losses, backward: the loss must be finite, some gradient non-zero) and
one test batch of one image, whose result must have the codebase's form. mmcv's
compiled ops are not needed: ``--ops`` chooses whose ops serve ``mmcv.ops`` (see
``mmpar.compat.patch_mmcv``).

The inputs are small (images of about 120x150), and so, unless --config-rois,
R-CNN heads sample at most 32 RoIs per training image and keep at most 100
detections per test image, and RPNs keep at most 200 proposals: the same code
runs on fewer boxes. fp16 settings are not applied (CPU, float32).

Examples::

    python tools/zoo.py --jobs 2 --json zoo.json
    python tools/zoo.py --codebase mmseg --one-per-dir --jobs 2 --by-dir
    python tools/zoo.py --codebase mmocr --dirs textdet --filter r18
    python tools/zoo.py --codebase mmaction2 --pythonpath DIR --dirs recognition/tin
    python tools/zoo.py --from-json zoo.json --by-dir

One line per config, as it finishes::

    PASS  faster_rcnn/faster_rcnn_r50_fpn_1x_coco.py  build 0.4s train 1.2s test 0.3s
    FAIL  libra_rcnn/libra_faster_rcnn_r50_fpn_1x_coco.py  train: AttributeError: ...
    SKIP  convnext/mask_rcnn_convnext-t_p4_w7_fpn_fp16_ms-crop_3x_coco.py  needs mmcls

then a summary: the counts and the pass rate over the counted configs (skipped
ones, which need a package the codebase does not install or hold no model, are
listed and not counted). Each config runs in its own child process (forked from
this one where the platform can), so that no global state (registries, torch
threads) leaks from one config into the next; one that runs past ``--timeout``
is stopped and fails. Exit status: 0 when every counted config passed, 1
otherwise. A user error (the codebase missing or not importing, a bad option)
ends the run with one line ``error: ...`` on stderr and exit status 2 (--debug:
the full traceback).

Configs are Python and run as code: only use config folders you trust.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional, Sequence

if importlib.util.find_spec("mmpar") is None:  # a source checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: The tool's modules (``tools/zoo/``), loaded as the package :data:`PACKAGE`.
ZOO_DIR = Path(__file__).resolve().parent / "zoo"
PACKAGE = "mmpar_zoo"


def load_zoo() -> ModuleType:
    """Load ``tools/zoo/`` as the package ``mmpar_zoo``, with the modules this script uses.

    Registered in ``sys.modules``, so that its modules import each other by that name
    and children (forked, or spawned: they run this script again) find them.
    """
    if PACKAGE in sys.modules:
        return sys.modules[PACKAGE]
    spec = importlib.util.spec_from_file_location(
        PACKAGE, ZOO_DIR / "__init__.py", submodule_search_locations=[str(ZOO_DIR)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    for name in ("cli", "codebase", "environment", "selection", "processes", "report"):
        importlib.import_module(f"{PACKAGE}.{name}")
    return package


zoo = load_zoo()


def main(argv: Optional[Sequence[str]] = None, description: Optional[str] = None) -> int:
    """Run the selected configs (or read an earlier run's results) and report them.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
        description: The help's text (default: this script's docstring).

    Returns:
        The exit status: 0 when every counted config passed, 1 otherwise (a user
        error exits with status 2 on its own).
    """
    cli, selection, processes, report = zoo.cli, zoo.selection, zoo.processes, zoo.report
    args = cli.parse_args(argv, description=description or __doc__)
    if args.from_json:
        results = report.read_json(args.from_json)
    else:
        codebase = zoo.codebase.get_codebase(args.codebase)
        for folder in args.pythonpath:
            if not Path(folder).is_dir():
                cli.fail(f"--pythonpath: {folder} is not a directory")
        zoo.environment.add_pythonpath([str(Path(f).resolve()) for f in args.pythonpath])
        root = (
            Path(args.configs_root)
            if args.configs_root
            else selection.default_configs_root(codebase)
        )
        configs = selection.select_configs(args, root)
        if args.json and not Path(args.json).resolve().parent.is_dir():
            cli.fail(f"--json: the folder of {args.json} does not exist")
        if importlib.util.find_spec(codebase.package) is None:
            cli.fail(f"{codebase.distribution} is not installed; install it ({codebase.install})")
        try:
            fixes = processes.prepare(codebase, args.ops, not args.no_fixes)
        except Exception as err:  # noqa: BLE001 - any import error is the user's to mend
            if args.debug:
                raise
            cli.fail(
                f"{codebase.distribution}'s models do not import with --ops {args.ops}: "
                f"{type(err).__name__}: {err}{processes.import_hint(err)}"
            )
        count = f"{len(configs)} config{'' if len(configs) == 1 else 's'}"
        print(f"{count} under {root}, {args.jobs} at a time", flush=True)
        if fixes:
            print(f"fixes of {args.codebase}'s own bugs: {', '.join(fixes)}", flush=True)
        results = processes.run_all(
            configs, root, args, lambda r: print(report.line(r), flush=True)
        )
        if args.json:
            report.write_json(args.json, results, root, args.ops, args.codebase, fixes)
    print(report.summary_text(results), flush=True)
    if args.by_dir:
        print(report.by_dir_table(results), flush=True)
    return 0 if report.summary(results)["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
