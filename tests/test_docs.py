"""Every ```python block of the Markdown pages runs as pasted, in a fresh interpreter.

The pages: README.md, CONTRIBUTING.md, CHANGELOG.md and every ``.md`` under docs/.

Each block is one test, named by file and line (``test_doc_block_runs[README.md:LINE]``). It
runs as a script (``sys.executable``, ``PYTHONPATH`` = the repository root) in a temporary
directory that holds a link to the repository's ``configs/``, so the paths the docs use
(``configs/tiny_det/tiny_det_synthetic.py``) resolve as they do in a checkout, and what
a block writes (``work_dirs/...``) lands in the temporary directory.

HTML comments on the lines right above a block's opening fence say how to run it;
they do not show when the Markdown is rendered:

``<!-- not-runnable: REASON -->``
    Deliberately not runnable (a fragment, a placeholder path): reported as skipped
    with REASON.
``<!-- needs: MODULE [MODULE...] -->``
    Optional packages, by import name (``mmcv``, ``PIL``, ``matplotlib``): skipped,
    naming the first one missing, where one is not installed.
``<!-- torchrun: N -->``
    A script for ``torchrun --nproc_per_node=N``: run under ``python -m
    torch.distributed.run`` with N processes. With fewer than N GPUs the processes get
    no GPU (``CUDA_VISIBLE_DEVICES=""``), so the block takes its CPU path (gloo).
``<!-- config: configs/DIR/NAME.py -->``
    A config file, not a script: written to that path beside the repository's configs
    (so its ``_base_`` files resolve), loaded with ``Config.fromfile`` and checked as
    ``tools/train.py`` checks a config; its model and optimizer are built.
``<!-- slow -->``
    Marked ``pytest.mark.slow``.

Any other comment right above a python block, or one of these keywords anywhere else
(not right above a python block), is an error, so that a misspelt or misplaced marker
does not go unnoticed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import torch

from tests._dist_helpers import free_port, run_launcher

ROOT = Path(__file__).resolve().parents[1]
# The Markdown pages: the repository's own and docs/ with its subfolders, less what the
# site's build writes there (docs/_build, and docs/_gen's copies of the root pages).
ROOT_PAGES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")
DOC_FILES = [
    *(ROOT / name for name in ROOT_PAGES),
    *sorted(
        path
        for path in (ROOT / "docs").rglob("*.md")
        if not {"_build", "_gen"} & set(path.relative_to(ROOT / "docs").parts)
    ),
]
TIMEOUT = 120  # seconds per block; the slowest (torchrun, 2 processes) takes 15-20
# marker keyword -> Block field
_FIELDS = {
    "not-runnable": "not_runnable",
    "needs": "needs",
    "torchrun": "nproc",
    "config": "config",
    "slow": "slow",
}

_FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")
_COMMENT = re.compile(r"^<!--(.*)-->\s*$")
_MARKER = re.compile(r"^<!--\s*(" + "|".join(_FIELDS) + r")\b")
_CONFIG_PATH = re.compile(r"^configs/[A-Za-z0-9_]+/[A-Za-z0-9_]+\.py$")


@dataclass(frozen=True)
class Block:
    """One ```python block of a Markdown file and the markers above it."""

    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    code: str
    not_runnable: Optional[str] = None
    needs: Tuple[str, ...] = ()
    nproc: int = 0  # 0: one plain interpreter; N: torch.distributed.run with N processes
    config: Optional[str] = None
    slow: bool = False

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def _parse_marker(text: str, where: str) -> Tuple[str, object]:
    """One comment's ``(keyword, value)``; ValueError naming ``where`` if it is not a marker."""
    body = text.strip()
    key, sep, value = body.partition(":")
    key, value = key.strip(), value.strip()
    if key == "slow" and not sep:
        return key, True
    if key == "not-runnable" and value:
        return key, value
    modules = value.split()
    if key == "needs" and modules and all(p.isidentifier() for m in modules for p in m.split(".")):
        return key, tuple(modules)
    if key == "torchrun" and value.isdigit() and int(value) >= 1:
        return key, int(value)
    if key == "config" and _CONFIG_PATH.match(value):
        return key, value
    expected = (
        "not-runnable: REASON, needs: MODULE..., torchrun: N, config: configs/DIR/NAME.py, or slow"
    )
    raise ValueError(f"{where}: unknown docs marker <!--{text}-->; expected {expected}")


def extract_blocks(text: str, path: str) -> List[Block]:
    """The ```python blocks of Markdown ``text``, with their markers.

    Raises:
        ValueError: a malformed marker, a marker above a block that is not python or
            not right above a block, two markers with the same keyword, or ``config``
            or ``torchrun`` combined with ``not-runnable``; or an unclosed fence. The
            message starts with ``path:line``.
    """
    lines = text.splitlines()
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if not fence:
            if _MARKER.match(line.strip()):
                # A marker counts only in the run of comments right above a fence.
                j = i
                while j < len(lines) and _COMMENT.match(lines[j].strip()):
                    j += 1
                if j >= len(lines) or not _FENCE.match(lines[j]):
                    raise ValueError(f"{path}:{i + 1}: docs marker not right above a code block")
            i += 1
            continue
        ticks, info = fence.group(1), fence.group(2).strip()
        start = i
        i += 1
        body: List[str] = []
        while i < len(lines) and not (
            lines[i].startswith(ticks[0] * len(ticks)) and not lines[i].strip(ticks[0]).strip()
        ):
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            raise ValueError(f"{path}:{start + 1}: code block never closed")
        i += 1  # the closing fence
        comments = []
        j = start - 1
        while j >= 0 and _COMMENT.match(lines[j].strip()):
            comments.append((j + 1, _COMMENT.match(lines[j].strip()).group(1)))
            j -= 1
        language = info.split()[0] if info else ""
        if language not in ("python", "py"):
            if any(_MARKER.match(f"<!--{c}-->") for _, c in comments):
                raise ValueError(
                    f"{path}:{start + 1}: docs marker above a {language or 'plain'} block; "
                    "markers apply to python blocks only"
                )
            continue
        markers: Dict[str, object] = {}
        for lineno, comment in reversed(comments):
            key, value = _parse_marker(comment, f"{path}:{lineno}")
            if key in markers:
                raise ValueError(f"{path}:{lineno}: docs marker {key!r} given twice")
            markers[key] = value
        if "not-runnable" in markers and ("config" in markers or "torchrun" in markers):
            raise ValueError(
                f"{path}:{start + 1}: a not-runnable block takes no config or torchrun marker"
            )
        if "config" in markers and "torchrun" in markers:
            raise ValueError(f"{path}:{start + 1}: a config block is not run under torchrun")
        fields = {_FIELDS[key]: value for key, value in markers.items()}
        blocks.append(Block(path, start + 1, "\n".join(body) + "\n", **fields))
    return blocks


def _collect() -> Tuple[List[Block], List[str]]:
    blocks: List[Block] = []
    errors: List[str] = []
    for doc in DOC_FILES:
        try:
            blocks += extract_blocks(
                doc.read_text(encoding="utf-8"), doc.relative_to(ROOT).as_posix()
            )
        except ValueError as exc:
            errors.append(str(exc))
    return blocks, errors


BLOCKS, MARKER_ERRORS = _collect()

# Loads a config block as tools/train.py does before it builds anything, then builds its
# model and optimizer (the datasets may name files the docs only describe).
_CHECK_CONFIG = """
import sys
from mmpar import Config
from mmpar.models import build_model, build_optimizer
from mmpar.runner.config_checks import check_train_config
cfg = Config.fromfile(sys.argv[1])
check_train_config(cfg)
model = build_model(cfg.model)
build_optimizer(model, cfg.optimizer)
print("config ok:", cfg.model["type"], type(model).__name__)
"""


def _workspace(tmp: Path, block: Block) -> Tuple[Path, List[str]]:
    """Lay out ``tmp`` for ``block``; return the script to run and its arguments."""
    configs = tmp / "configs"
    if block.config is None:
        configs.symlink_to(ROOT / "configs", target_is_directory=True)
        script = tmp / "snippet.py"
        script.write_text(block.code, encoding="utf-8")
        return script, []
    # A real folder beside links to the repository's config folders, so that the
    # block's ../_base_ paths resolve and nothing is written into the checkout.
    configs.mkdir()
    for entry in (ROOT / "configs").iterdir():
        (configs / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    target = tmp / block.config
    target.parent.mkdir(exist_ok=True)
    target.write_text(block.code, encoding="utf-8")
    script = tmp / "check_config.py"
    script.write_text(_CHECK_CONFIG, encoding="utf-8")
    return script, [str(target)]


def run_block(block: Block, tmp: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``block`` as described in the module docstring; return the finished process."""
    tmp.mkdir(parents=True, exist_ok=True)
    script, args = _workspace(tmp, block)
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    launcher: List[str] = []
    if block.nproc:
        launcher = [
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={block.nproc}",
            f"--master_port={free_port()}",
        ]
        if torch.cuda.device_count() < block.nproc:
            env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, *launcher, str(script), *args]
    return run_launcher(cmd, timeout=timeout, cwd=tmp, env=env)


# Prints the first module of argv that cannot be found. A dotted name imports its parent
# packages (mmcv for mmcv._ext), so this runs in a child process, not in the tests'.
_FIND_MODULES = """
import importlib.util, sys
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:
        found = False
    if not found:
        print(name)
        break
"""


def missing_module(modules: Tuple[str, ...]) -> Optional[str]:
    """The first of ``modules`` (import names) that is not installed, or None."""
    if not modules:
        return None
    proc = subprocess.run(
        [sys.executable, "-c", _FIND_MODULES, *modules],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    return proc.stdout.strip() or None


def _params() -> list:
    """One ``pytest.param`` per block, ``slow`` where marked (a list: pytest wants a Collection)."""
    return [
        pytest.param(block, id=block.id, marks=[pytest.mark.slow] if block.slow else [])
        for block in BLOCKS
    ]


def test_docs_have_python_blocks():
    """The extraction finds the examples (a broken parser would find none)."""
    assert any(b.path == "README.md" for b in BLOCKS), [b.id for b in BLOCKS]
    guide = [b for b in BLOCKS if b.path == "docs/guide.md"]
    assert len(guide) >= 5, [b.id for b in BLOCKS]
    assert any(b.nproc for b in guide), "the guide's torchrun example is not run under torchrun"


def test_docs_markers_are_well_formed():
    assert MARKER_ERRORS == []


@pytest.mark.parametrize("block", _params())
def test_doc_block_runs(block: Block, tmp_path: Path):
    if block.not_runnable:
        pytest.skip(f"{block.id}: not runnable: {block.not_runnable}")
    missing = missing_module(block.needs)
    if missing:
        pytest.skip(f"{block.id}: needs {missing}, which is not installed")
    proc = run_block(block, tmp_path)
    assert proc.returncode == 0, (
        f"{block.id} exited {proc.returncode}\n--- block ---\n{block.code}"
        f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
    )


# The extraction itself, on small made-up documents.

_DOC = """\
Text.

```python
print("plain")
```

<!-- needs: mmcv PIL -->
<!-- slow -->
```python
import mmcv
```

```bash
echo not python
```

<!-- not-runnable: a fragment -->
````python
model.train_step(batch, optimizer)
```
still inside
````

<!-- torchrun: 2 -->
```py
import torch
```
"""


def test_extract_blocks_lines_and_markers():
    blocks = extract_blocks(_DOC, "doc.md")
    assert [(b.line, b.code) for b in blocks] == [
        (3, 'print("plain")\n'),
        (9, "import mmcv\n"),
        (18, "model.train_step(batch, optimizer)\n```\nstill inside\n"),
        (25, "import torch\n"),
    ]
    assert blocks[0] == Block("doc.md", 3, 'print("plain")\n')
    assert blocks[1].needs == ("mmcv", "PIL") and blocks[1].slow
    assert blocks[2].not_runnable == "a fragment"
    assert blocks[3].nproc == 2 and blocks[3].id == "doc.md:25"


@pytest.mark.parametrize(
    "doc, message",
    [
        pytest.param(
            "<!-- not-runable: typo -->\n```python\npass\n```\n",
            "doc.md:1: unknown docs marker",
            id="misspelt",
        ),
        pytest.param(
            "<!-- torchrun: two -->\n```python\npass\n```\n",
            "doc.md:1: unknown docs marker",
            id="bad-value",
        ),
        pytest.param(
            "<!-- slow -->\n\n```python\npass\n```\n",
            "doc.md:1: docs marker not right above",
            id="detached",
        ),
        pytest.param(
            "<!-- slow -->\n```bash\ntrue\n```\n",
            "doc.md:2: docs marker above a bash block",
            id="not-python",
        ),
        pytest.param(
            "<!-- slow -->\n<!-- slow -->\n```python\npass\n```\n",
            "doc.md:2: docs marker 'slow' given twice",
            id="twice",
        ),
        pytest.param("```python\npass\n", "doc.md:1: code block never closed", id="unclosed"),
        pytest.param(
            "<!-- not-runnable: x -->\n<!-- torchrun: 2 -->\n```python\npass\n```\n",
            "doc.md:3: a not-runnable block",
            id="contradiction",
        ),
    ],
)
def test_extract_blocks_refuses_bad_markers(doc: str, message: str):
    with pytest.raises(ValueError) as info:
        extract_blocks(doc, "doc.md")
    assert str(info.value).startswith(message)


def test_missing_module():
    assert missing_module(()) is None
    assert missing_module(("json", "os.path")) is None
    assert missing_module(("json", "no_such_module_xyz", "os")) == "no_such_module_xyz"
    assert missing_module(("json.no_such_submodule",)) == "json.no_such_submodule"
    assert missing_module(("no_such_package_xyz.sub",)) == "no_such_package_xyz.sub"


def test_run_block_reports_failure(tmp_path: Path):
    failing = run_block(Block("doc.md", 1, "import os\nmodel\n"), tmp_path)
    assert failing.returncode != 0
    assert "NameError: name 'model' is not defined" in failing.stderr


def test_run_block_config_resolves_base_and_builds(tmp_path: Path):
    """A config block inherits from the repository's configs and its model is built."""
    code = '_base_ = "../tiny_det/tiny_det_synthetic.py"\nmodel = dict(type="TinyDett")\n'
    proc = run_block(Block("doc.md", 1, code, config="configs/mine/typo.py"), tmp_path)
    assert proc.returncode != 0
    assert "'TinyDett' is not registered" in proc.stderr
    assert not (ROOT / "configs" / "mine").exists()


@pytest.mark.slow
def test_run_block_under_torchrun(tmp_path: Path):
    """A torchrun block runs once per process, each with its own rank."""
    ranks = run_block(
        Block("doc.md", 1, "import os\nprint('rank', os.environ['RANK'])\n", nproc=2), tmp_path
    )
    assert ranks.returncode == 0, ranks.stderr
    assert sorted(re.findall(r"rank \d", ranks.stdout)) == ["rank 0", "rank 1"]
