"""What README.md and docs/*.md name exists: repository files, tests and test ids, links.

A reader follows the docs to a file (``tests/test_faults.py``), a test
(``test_survivors_exit_nonzero_within_the_timeout[kill|exit|raise|stop]``, every id
between the brackets, ``|`` apart) or a heading (``tools.md#coco-ap---eval-bbox``).
Each such reference is checked here, so that renaming a test, moving a file or
editing a README above an example whose id it quotes (``test_doc_block_runs[README.md:34]``)
fails CI instead of misleading a reader.

What counts as a reference:

* a repository path: a word starting with ``.ci/``, ``configs/``, ``docs/``, ``mmpar/``,
  ``tests/`` or ``tools/``, in prose or in a code block; globs (``docs/*.md``) must match
  a file, and words with ``<...>`` placeholders are not paths. Two kinds of path are
  named on purpose without being in the repository, and are accepted as such:

  - a config that the docs have the reader write: the path of a ``<!-- config: PATH -->``
    block (``tests/test_docs.py``), e.g. ``configs/pets/tiny_det_pets.py``;
  - another codebase's files: what follows ``mmpar.compat.run`` in the same command
    (``python -m mmpar.compat.run tools/train.py configs/faster_rcnn/...``: mmdet's
    script and config), up to the end of the backtick span or of the shell command;

* a test: ``test_name``, ``test_name[id|id]``, ``tests/dir/test_file.py::test_name[id]``,
  ``test_file.py::test_name`` or ``::test_name`` (the file of the reference before),
  outside python blocks (whose ``test_pipeline = ...`` are config keys, and which
  ``tests/test_docs.py`` runs anyway). A bare ``test_file.py`` must be a file under
  ``tests/``. Names are looked up in the tests' source (``def test_...``); ids with
  brackets in ``pytest --collect-only`` of the files that define them;
* a Markdown link ``[text](target)`` to a file of the repository, and its ``#anchor``:
  a heading of the target, slugged as GitHub does.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

from tests.test_docs import BLOCKS, DOC_FILES, ROOT

PATH_ROOTS = (".ci", "configs", "docs", "mmpar", "tests", "tools")
_PATH = re.compile(r"(?<![\w./~-])(?:" + "|".join(map(re.escape, PATH_ROOTS)) + r")/[\w./*<>-]*")
_TEST = re.compile(
    r"(?<![\w./-])(?:(?P<file>(?:[\w/]+/)?test_\w+\.py)?(?P<sep>::))?"
    r"(?P<name>test_\w+)(?P<py>\.py)?(?:\[(?P<ids>[^\]\s`]*)\])?"
)
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\w*)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_FOREIGN_START = "mmpar.compat.run"


@dataclass(frozen=True)
class Ref:
    """One reference of a document: ``kind`` is ``path``, ``test``, ``test_file`` or ``link``."""

    doc: str
    line: int
    kind: str
    text: str
    file: Optional[str] = None  # a test's file, as written ("tests/x.py" or "x.py")
    ids: Tuple[str, ...] = ()  # a test's parameter ids

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def _lines(text: str) -> Iterable[Tuple[int, str, str]]:
    """``(line number, line, block language)``: ``""`` in prose, ``"-"`` for a fence line.

    A shell command continued with a trailing backslash comes as one line (at its first
    line number), so that what follows ``mmpar.compat.run`` is seen whole.
    """
    fence: Optional[str] = None
    language = ""
    pending: Optional[Tuple[int, str]] = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None and match:
            fence, language = match.group(1), match.group(2) or "text"
            yield number, line, "-"
            continue
        if (
            fence is not None
            and line.strip() == fence[0] * len(line.strip())
            and (len(line.strip()) >= len(fence))
        ):
            fence = None
            yield number, line, "-"
            continue
        if fence is not None and line.endswith("\\"):
            start, head = pending or (number, "")
            pending = (start, head + line[:-1] + " ")
            continue
        if pending is not None:
            yield pending[0], pending[1] + line, language if fence is not None else ""
            pending = None
            continue
        yield number, line, language if fence is not None else ""


def _foreign_spans(line: str) -> List[Tuple[int, int]]:
    """Character ranges of ``line`` that name another codebase's files."""
    spans = []
    for match in re.finditer(re.escape(_FOREIGN_START), line):
        end = line.find("`", match.end())
        spans.append((match.end(), len(line) if end < 0 else end))
    return spans


def extract_refs(text: str, doc: str) -> List[Ref]:
    """The references of Markdown ``text`` (see the module docstring), in order."""
    refs: List[Ref] = []
    for number, line, language in _lines(text):
        if language == "-":
            continue
        foreign = _foreign_spans(line)
        for match in _PATH.finditer(line):
            path = match.group(0).rstrip(".,:;")
            if "<" in path or any(a <= match.start() < b for a, b in foreign):
                continue
            refs.append(Ref(doc, number, "path", path))
        if language in ("python", "py"):
            continue
        for match in _TEST.finditer(line):
            if match.group("py"):
                if not match.group("sep"):
                    refs.append(Ref(doc, number, "test_file", match.group("name") + ".py"))
                continue
            ids = tuple(match.group("ids").split("|")) if match.group("ids") is not None else ()
            file = match.group("file")
            if file is None and match.group("sep"):  # "::test_x": the file named before
                file = next((r.file for r in reversed(refs) if r.kind == "test"), None)
            refs.append(Ref(doc, number, "test", match.group(0), file, ids))
        if not language:
            for match in _LINK.finditer(line):
                target = match.group("target")
                if not re.match(r"^[a-z]+:", target):  # not https:, mailto:
                    refs.append(Ref(doc, number, "link", target))
    return refs


def written_configs() -> Set[str]:
    """Config paths that the docs have the reader write (``<!-- config: PATH -->`` blocks)."""
    return {block.config for block in BLOCKS if block.config}


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(doc: Path) -> Tuple[str, ...]:
    """The heading anchors of a Markdown file (a repeated heading gets ``-1``, ``-2``...)."""
    seen: Dict[str, int] = {}
    found = []
    for _, line, language in _lines(doc.read_text(encoding="utf-8")):
        match = _HEADING.match(line) if not language else None
        if match:
            slug = github_slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.append(slug if count == 0 else f"{slug}-{count}")
    return tuple(found)


@lru_cache(maxsize=None)
def defined_tests() -> Dict[str, Tuple[str, ...]]:
    """Test function name -> the test files (relative to the root) that define it."""
    found: Dict[str, List[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name.startswith("test_")
            ):
                found.setdefault(node.name, []).append(path.relative_to(ROOT).as_posix())
    return {name: tuple(sorted(set(files))) for name, files in found.items()}


def resolve_test_file(file: str) -> List[str]:
    """The files under ``tests/`` that a written test file (``x.py`` or ``tests/x.py``) means."""
    if "/" in file:
        return [file] if (ROOT / file).is_file() else []
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob(file))


def _collect(files: Iterable[str]) -> Set[str]:
    """``file::name[id]`` of every test pytest collects from ``files``, in a child process."""
    files = sorted(set(files))
    if not files:
        return set()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["-o", "addopts=", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"collecting {files} failed:\n{proc.stdout[-3000:]}"
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


_COLLECTED: Dict[str, Set[str]] = {}  # test file -> the ids collected from it


def collected_ids(files: Iterable[str]) -> Set[str]:
    """The ids of ``files``' tests; collects, in one child process, the files not done yet
    together with every file whose ids the docs name (so that the run collects once)."""
    files = set(files)
    todo = (files | _files_with_named_ids()) - _COLLECTED.keys()
    if files - _COLLECTED.keys():
        ids = _collect(todo)
        for file in todo:
            _COLLECTED[file] = {i for i in ids if i.startswith(f"{file}::")}
    return set().union(*(_COLLECTED[file] for file in files))


def _name(ref: Ref) -> str:
    """A test reference's function name."""
    return ref.text.split("[")[0].split("::")[-1]


def _all_refs() -> List[Ref]:
    refs: List[Ref] = []
    for doc in DOC_FILES:
        refs += extract_refs(doc.read_text(encoding="utf-8"), doc.relative_to(ROOT).as_posix())
    return refs


REFS = _all_refs()


def _files_with_named_ids() -> Set[str]:
    """The test files whose ids the docs name, and this one (the tests below look one up)."""
    return {
        file
        for ref in REFS
        if ref.kind == "test" and ref.ids
        for file in defined_tests().get(_name(ref), ())
    } | {Path(__file__).relative_to(ROOT).as_posix()}


def missing_paths(refs: Iterable[Ref]) -> List[str]:
    written = written_configs()
    missing = []
    for ref in refs:
        if ref.kind != "path" or ref.text in written:
            continue
        exists = any(ROOT.glob(ref.text)) if "*" in ref.text else (ROOT / ref.text).exists()
        if not exists:
            missing.append(ref.where)
    return missing


def missing_tests(refs: Iterable[Ref]) -> List[str]:
    defined = defined_tests()
    missing = []
    wanted: List[Tuple[Ref, List[str]]] = []
    for ref in refs:
        if ref.kind == "test_file":
            if not resolve_test_file(ref.text):
                missing.append(f"{ref.where} (no such file under tests/)")
            continue
        if ref.kind != "test":
            continue
        files = list(defined.get(_name(ref), ()))
        if ref.file is not None:
            files = [f for f in files if f in resolve_test_file(ref.file)]
        if not files:
            missing.append(f"{ref.where} (no such test function)")
        elif ref.ids:
            wanted.append((ref, files))
    collected = collected_ids(f for _, files in wanted for f in files)
    for ref, files in wanted:
        name = _name(ref)
        for param in ref.ids:
            if not any(f"{file}::{name}[{param}]" in collected for file in files):
                missing.append(f"{ref.where} (no test id {name}[{param}])")
    return missing


def broken_links(refs: Iterable[Ref]) -> List[str]:
    broken = []
    for ref in refs:
        if ref.kind != "link":
            continue
        target, _, anchor = ref.text.partition("#")
        path = (ROOT / ref.doc).parent / target if target else ROOT / ref.doc
        if not path.exists():
            broken.append(f"{ref.where} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.resolve()):
            broken.append(f"{ref.where} (no heading #{anchor} in {target or ref.doc})")
    return broken


def test_docs_name_references():
    """The scan finds the references it is meant to (a broken pattern would find none)."""
    kinds = {ref.kind for ref in REFS}
    assert kinds == {"path", "test", "test_file", "link"}, kinds
    assert any(ref.ids for ref in REFS if ref.kind == "test")


def test_named_files_exist():
    assert missing_paths(REFS) == []


def test_named_tests_exist():
    assert missing_tests(REFS) == []


def test_links_resolve():
    assert broken_links(REFS) == []


# The scan itself, on a small made-up document.

_DOC = """\
See `tests/test_docs.py` and `tests/no_such_file.py`; `docs/*.md`, `docs/*.rst`,
`mmpar/<RUN_ID>/attempt<N>/` (a placeholder).
`test_extract_refs_finds_each_kind[a|b]`, `::test_links_resolve`,
`tests/test_doc_references.py::test_named_files_exist`, `test_doc_references.py`,
`test_no_such_name`, `test_nowhere.py`, [a link](tools.md#coco-ap---eval-bbox),
[gone](tools.md#no-such-heading), [web](https://example.com/x).

```bash
python -m mmpar.compat.run tools/train.py configs/faster_rcnn/x.py \\
    --work-dir configs/not_here/
python tools/test.py configs/pets/tiny_det_pets.py
```

```python
test_pipeline = [configs/in_python.py]
```
"""


@pytest.mark.parametrize("param", ["a", "b"])
def test_extract_refs_finds_each_kind(param: str):
    refs = extract_refs(_DOC, "docs/doc.md")
    paths = [r.text for r in refs if r.kind == "path"]
    assert paths == [
        "tests/test_docs.py",
        "tests/no_such_file.py",
        "docs/*.md",
        "docs/*.rst",
        "tests/test_doc_references.py",
        "tools/test.py",
        "configs/pets/tiny_det_pets.py",
        "configs/in_python.py",
    ]
    tests = [(r.text, r.file, r.ids) for r in refs if r.kind == "test"]
    assert tests == [
        ("test_extract_refs_finds_each_kind[a|b]", None, ("a", "b")),
        ("::test_links_resolve", None, ()),
        (
            "tests/test_doc_references.py::test_named_files_exist",
            "tests/test_doc_references.py",
            (),
        ),
        ("test_no_such_name", None, ()),
    ]
    assert [r.text for r in refs if r.kind == "test_file"] == [
        "test_doc_references.py",
        "test_nowhere.py",
    ]
    # mmdet's files after mmpar.compat.run are not ours, on the continued line too
    assert [(r.line, r.text) for r in refs if r.kind == "path"][-2:] == [
        (11, "configs/pets/tiny_det_pets.py"),
        (15, "configs/in_python.py"),
    ]
    assert [r.text for r in refs if r.kind == "link"] == [
        "tools.md#coco-ap---eval-bbox",
        "tools.md#no-such-heading",
    ]


def test_checks_report_what_is_missing():
    refs = extract_refs(_DOC, "docs/doc.md")
    assert missing_paths(refs) == [
        "docs/doc.md:1: tests/no_such_file.py",
        "docs/doc.md:1: docs/*.rst",
        "docs/doc.md:15: configs/in_python.py",
    ]
    assert missing_tests(refs) == [
        "docs/doc.md:5: test_no_such_name (no such test function)",
        "docs/doc.md:5: test_nowhere.py (no such file under tests/)",
    ]
    assert broken_links(refs) == [
        "docs/doc.md:6: tools.md#no-such-heading (no heading #no-such-heading in tools.md)"
    ]


def test_a_missing_test_id_is_reported():
    ref = Ref("doc.md", 1, "test", "test_extract_refs_finds_each_kind[c]", None, ("c",))
    assert missing_tests([ref]) == [
        "doc.md:1: test_extract_refs_finds_each_kind[c] "
        "(no test id test_extract_refs_finds_each_kind[c])"
    ]


def test_github_slug():
    assert github_slug("COCO AP: `--eval bbox`") == "coco-ap---eval-bbox"
    assert github_slug("6. A dead rank costs minutes, never the run") == (
        "6-a-dead-rank-costs-minutes-never-the-run"
    )
    assert (
        github_slug("mmdet's `build_dataloader` arguments") == "mmdets-build_dataloader-arguments"
    )
