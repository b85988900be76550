"""How the tools are launched: the legacy launcher's local rank, a hung peer, elastic restarts.

The distributed runs are real ``tools/train.py`` processes under
``torch.distributed.run`` on gloo, each bounded by a hard timeout and stopped
with everything it started when the test ends.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"mmpar_tool_{name}", ROOT / "tools" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "tool, positional", [("train", ["c.py"]), ("test", ["c.py", "w.pth", "--eval"])]
)
@pytest.mark.parametrize("spelling", ["--local-rank=1", "--local_rank=1", "--local-rank 1"])
def test_tools_take_both_local_rank_spellings(tool: str, positional: list, spelling: str) -> None:
    args = _tool(tool).parse_args([*positional, *spelling.split(), "--launcher", "pytorch"])
    assert args.local_rank == 1 and args.launcher == "pytorch"
