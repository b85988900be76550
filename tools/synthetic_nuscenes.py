"""Write a small synthetic nuScenes to check an install end to end without the download.

    python tools/synthetic_nuscenes.py --out data/nuscenes

writes ``v1.0-trainval`` (2 train scenes, 1 val scene) and ``v1.0-test`` (1 scene) of 4 key
frames each: the nuScenes tables, six 1600x900 camera images and a lidar sweep per frame,
one unannotated sweep of every sensor between key frames, the CAN bus poses under
``--can-bus`` (default: the folder above ``--out``, as BEVFormer's ``--canbus ./data``
expects) and the map. A repository's own ``tools/create_data.py nuscenes`` then makes its
info files, and its test script's evaluation runs nuScenes' metric on the val scene.
About 12 MB and a few seconds per scene. ``--version v1.0-mini`` writes the mini split
instead. See docs/research.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nuscenes_synth import build, tables


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="the nuScenes root to write")
    parser.add_argument(
        "--can-bus", type=Path, help="where can_bus/ goes (default: the folder above --out)"
    )
    parser.add_argument(
        "--version",
        action="append",
        choices=tables.VERSIONS,
        help="a dataset version to write; repeat for several (default: v1.0-trainval, v1.0-test)",
    )
    parser.add_argument("--train-scenes", type=int, default=2)
    parser.add_argument("--val-scenes", type=int, default=1)
    parser.add_argument("--test-scenes", type=int, default=1)
    parser.add_argument("--samples", type=int, default=4, help="key frames per scene")
    parser.add_argument("--sweeps", type=int, default=1, help="frames between key frames")
    parser.add_argument("--objects", type=int, default=8, help="annotated objects per scene")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def check(args: argparse.Namespace) -> None:
    """Raise ValueError naming the first argument out of its range."""
    versions = args.version or ["v1.0-trainval", "v1.0-test"]
    for version in versions:
        for split, names in tables.SPLIT_SCENES[version].items():
            wanted = getattr(args, f"{split}_scenes")
            if not 0 <= wanted <= len(names):
                raise ValueError(
                    f"--{split}-scenes: expected 0 to {len(names)} for {version}, got {wanted}"
                )
    for name, low, high in (("samples", 2, 40), ("sweeps", 0, 10), ("objects", 1, 100)):
        value = getattr(args, name)
        if not low <= value <= high:
            raise ValueError(f"--{name}: expected {low} to {high}, got {value}")
    args.version = versions


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        check(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    settings = build.Settings(
        scenes={"train": args.train_scenes, "val": args.val_scenes, "test": args.test_scenes},
        samples=args.samples,
        sweeps=args.sweeps,
        objects=args.objects,
        seed=args.seed,
    )
    can_bus_root = args.can_bus if args.can_bus is not None else args.out.resolve().parent
    start = time.perf_counter()
    folders = build.generate(args.out, can_bus_root, args.version, settings)
    for folder in folders:
        print(f"wrote {folder}")
    print(f"can_bus under {can_bus_root / 'can_bus'}; {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
