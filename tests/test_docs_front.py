"""The pages as a reader needs them: a short README, figures without their history.

* ``README.md`` stays within :data:`README_MAX_LINES` lines.
* No line of the README, ``CONTRIBUTING.md`` or ``docs/`` names an internal issue number
  ("issue 30", "issues 18 and 19", "#30") or a commit id (7 to 40 hex digits, with a digit
  and a letter): history goes to ``CHANGELOG.md``. The exception is a settings block, a
  fenced block whose info string is ``text settings``: it states the machine, software,
  command and the version measured, which may be a commit id. Another project's issues
  ("mmcv issues 2949") are not ours and pass.
* Relative links: ``tests/test_doc_references.py::test_links_resolve`` checks every link
  of these pages (and of ``CHANGELOG.md``), anchors included; here, that it covers them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, List, Tuple

import pytest

from tests.test_doc_references import REFS, broken_links, extract_refs
from tests.test_docs import DOC_FILES, ROOT

README_MAX_LINES = 200
SETTINGS_INFO = "text settings"
# Projects whose issue numbers a page may cite: theirs, not ours.
_FOREIGN = ("mmcv", "mmdet", "mmengine", "torch", "pytorch", "torchvision", "numpy", "pip")
_ISSUE = re.compile(
    "".join(rf"(?<!{name} )" for name in _FOREIGN) + r"(?<![\w-])(?:issues?\s+#?\d+|#\d+\b)",
    re.IGNORECASE,
)
_COMMIT = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(.*?)\s*$")


def history_lines(text: str) -> List[Tuple[int, str]]:
    """``(line number, line)`` of each line that names an issue number or a commit id,
    outside settings blocks."""
    found = []
    fence = None  # the open fence's marker, and whether it is a settings block
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if match and fence is None:
            fence = (match.group(1), match.group(2) == SETTINGS_INFO)
            continue
        if match and fence is not None and line.strip() == fence[0][0] * len(line.strip()):
            if len(line.strip()) >= len(fence[0]):
                fence = None
                continue
        if fence is not None and fence[1]:
            continue
        if _ISSUE.search(line) or _COMMIT.search(line):
            found.append((number, line.strip()))
    return found


def scanned_pages() -> List[Path]:
    """The pages that must carry no history: every page but the changelog."""
    return [path for path in DOC_FILES if path.name != "CHANGELOG.md"]


def _where(pages: Iterable[Path]) -> List[str]:
    lines = []
    for path in pages:
        for number, line in history_lines(path.read_text(encoding="utf-8")):
            lines.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {line}")
    return lines


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move details to docs/"
    )


def test_pages_carry_no_history():
    """Issue numbers and commit ids only in CHANGELOG.md and in settings blocks."""
    assert _where(scanned_pages()) == []


def test_pages_are_all_scanned():
    names = {path.relative_to(ROOT).as_posix() for path in DOC_FILES}
    assert {"README.md", "CONTRIBUTING.md", "CHANGELOG.md"} <= names
    for page in (ROOT / "docs").rglob("*.md"):
        parts = page.relative_to(ROOT / "docs").parts
        if not {"_build", "_gen"} & set(parts):
            assert page.relative_to(ROOT).as_posix() in names
    # the link check reads the README's links (it would find none with a broken pattern)
    assert any(ref.doc == "README.md" for ref in REFS if ref.kind == "link")


# The scan itself, on made-up pages.

_PAGE = """\
# Figures (issue 30)

Before issue 30: 72x; since a009b20 it is 1.1x (issues 18 and 19, see #27).
mmcv issues 2949, 3035 and PyTorch issue 1234 are theirs; a file vgg19-dcbb9e9d.pth is
not a commit, nor are 1234567, deadbeef, cafe or 0x1f2e3d4c5b.

```text settings
Machine: 2 cores
Version: a009b20 (issue 30's run)
```

```text
Version: a009b20
```

````python
# ```text settings
x = "1e88035"
````
"""


def test_history_lines_flags_issues_and_commits_outside_settings():
    assert [number for number, _ in history_lines(_PAGE)] == [1, 3, 13, 18]


@pytest.mark.parametrize(
    "line, flagged",
    [
        ("the fix of issue 30", True),
        ("Issue #7 says", True),
        ("see #27", True),
        ("at commit 96d555d", True),
        ("`083d947`", True),
        ("mmcv issues 2949, 3035", False),
        ("torch issue 123", False),
        ("an issue of taste, 30 of them", False),
        ("sha 0123456789abcdef0123456789abcdef01234567", True),
        ("size 1333x800, 2,577 passed", False),
        ("models/vgg19-dcbb9e9d.pth", False),
        ("#: comment in python", False),
    ],
)
def test_history_patterns(line: str, flagged: bool):
    assert bool(history_lines(line)) is flagged


def test_a_broken_relative_link_is_caught():
    refs = extract_refs("[x](nowhere.md) [y](tools.md#no-such-heading)\n", "docs/page.md")
    assert len(broken_links(refs)) == 2
