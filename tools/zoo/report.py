"""What the tool prints and writes: a line per config, the summary, the table, the JSON file."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List

from mmpar_zoo.cli import fail


def line(result: dict) -> str:
    """The one line of a config: PASS with timings, FAIL with the stage and error, SKIP why."""
    status, rel = result["status"], result["config"]
    if status == "PASS":
        times = " ".join(f"{k} {v:.1f}s" for k, v in result["times"].items())
        return f"PASS  {rel}  {times}"
    if status == "SKIP":
        return f"SKIP  {rel}  {result['reason']}"
    return f"FAIL  {rel}  {result['stage']}: {result['error']}"


def summary(results: List[dict]) -> Dict[str, Any]:
    """The counts and the pass rate over the counted (not skipped) configs.

    Returns:
        ``configs``, ``passed``, ``failed``, ``skipped``, ``counted`` and
        ``pass_rate`` (None where nothing is counted).
    """
    counts = {s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    counted = counts["PASS"] + counts["FAIL"]
    return dict(
        configs=len(results),
        passed=counts["PASS"],
        failed=counts["FAIL"],
        skipped=counts["SKIP"],
        counted=counted,
        pass_rate=counts["PASS"] / counted if counted else None,
    )


def summary_text(results: List[dict]) -> str:
    """The summary line, then the skipped configs and the failed ones, each with its reason."""
    s = summary(results)
    rate = "n/a" if s["pass_rate"] is None else f"{100 * s['pass_rate']:.1f}%"
    lines = [
        f"summary: {s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped of "
        f"{s['configs']} configs; pass rate {rate} ({s['passed']}/{s['counted']} counted)"
    ]
    skipped = [r for r in results if r["status"] == "SKIP"]
    if skipped:
        lines.append("skipped (not counted):")
        lines += [f"  {r['config']}  {r['reason']}" for r in skipped]
    failed = [r for r in results if r["status"] == "FAIL"]
    if failed:
        lines.append("failed:")
        lines += [f"  {r['config']}  {r['stage']}: {r['error']}" for r in failed]
    return "\n".join(lines)


def by_dir_table(results: List[dict]) -> str:
    """A markdown table: model directory, passed/counted, failures with their reasons."""
    groups: Dict[str, List[dict]] = OrderedDict()
    for r in sorted(results, key=lambda r: r["config"]):
        groups.setdefault(r["dir"], []).append(r)
    rows = ["| directory | passed/total | failures |", "|---|---|---|"]
    for directory, rs in groups.items():
        passed = sum(r["status"] == "PASS" for r in rs)
        counted = sum(r["status"] != "SKIP" for r in rs)
        reasons: Dict[str, List[str]] = OrderedDict()  # one note per distinct reason
        for r in rs:
            if r["status"] == "FAIL":
                reasons.setdefault(f"{r['stage']}: {r['error']}", []).append(r["config"])
        notes = [
            f"{_names(configs, counted)}: {reason}".replace("|", "\\|")
            for reason, configs in reasons.items()
        ]
        skipped = [r for r in rs if r["status"] == "SKIP"]
        if skipped:
            reasons = sorted({r["reason"] for r in skipped})
            notes.append(f"{len(skipped)} skipped ({'; '.join(reasons)})")
        rows.append(f"| {directory} | {passed}/{counted} | {'<br>'.join(notes)} |")
    return "\n".join(rows)


def _names(configs: List[str], counted: int) -> str:
    if len(configs) == counted > 1:
        return f"all {counted}"
    return ", ".join(f"`{Path(c).name}`" for c in configs)


def write_json(
    path: str, results: List[dict], root: Path, ops: str, codebase: str, fixes: List[str]
) -> None:
    """Write the run (``codebase``, ``configs_root``, ``ops``, ``fixes``, ``summary``,
    ``results``) to ``path``."""
    payload = dict(
        codebase=codebase,
        configs_root=str(root),
        ops=ops,
        fixes=fixes,
        summary=summary(results),
        results=results,
    )
    Path(path).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


def read_json(path: str) -> List[dict]:
    """The results of a file :func:`write_json` wrote; any other file is a user error.

    Raises:
        SystemExit: A user error (``fail``): ``path`` cannot be read or is no
            results file of this tool.
    """
    try:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        results = payload["results"]
        for r in results:
            r["config"], r["status"]  # noqa: B018 - the keys every report reads
    except (OSError, ValueError, KeyError, TypeError) as err:
        fail(
            f"--from-json: {path} is not a results file of this tool ({type(err).__name__}: {err})"
        )
    return results
