"""The synthetic map expansion: its records, its geometry and nuScenes-devkit reading it.

The devkit checks run in a child process with an mmpar install target on PYTHONPATH
(nuscenes-devkit lives there, not in the main environment); they skip where none exists.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from shapely.geometry import LineString, Polygon, box

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
from nuscenes_synth import maps, world  # noqa: E402  (tools/ is not a package)

TARGETS = [pathlib.Path.home() / ".cache" / "mmpar" / name for name in ("mmcv-1.4.0", "mmcv-1.7.0")]


def _routes() -> list[np.ndarray]:
    specs = [
        world.SceneSpec(0, (600.0, 900.0), 0.3, 4, 0),
        world.SceneSpec(1, (900.0, 1300.0), 2.0, 4, 0),
    ]
    return [world.route(spec, 20.0) for spec in specs]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict]:
    root = tmp_path_factory.mktemp("nuscenes")
    paths = maps.write_expansions(root, {"boston-seaport": _routes()})
    assert [p.name for p in paths] == [f"{loc}.json" for loc in maps.LOCATIONS]
    return root, json.loads((root / "maps/expansion/boston-seaport.json").read_text())


def _xy(obj: dict, tokens: list[str]) -> list[tuple[float, float]]:
    nodes = {n["token"]: (n["x"], n["y"]) for n in obj["node"]}
    return [nodes[t] for t in tokens]


def _polygon(obj: dict, token: str) -> Polygon:
    record = next(p for p in obj["polygon"] if p["token"] == token)
    return Polygon(_xy(obj, record["exterior_node_tokens"]))


def test_every_layer_and_reference_resolves(written: tuple[pathlib.Path, dict]) -> None:
    _, obj = written
    assert obj["version"] == "1.3"
    tokens = {layer: {r["token"] for r in obj[layer]} for layer in maps.LAYERS}
    every = [t for layer in maps.LAYERS for t in tokens[layer]]
    assert len(every) == len(set(every))
    for layer in ("lane", "road_segment", "road_block", "ped_crossing", "walkway", "stop_line"):
        assert obj[layer], layer
        for record in obj[layer]:
            assert record["polygon_token"] in tokens["polygon"]
    for layer in ("road_divider", "lane_divider"):
        assert all(r["line_token"] in tokens["line"] for r in obj[layer])
    assert len(obj["carpark_area"]) == 2
    assert set(obj["arcline_path_3"]) == set(obj["connectivity"]) == tokens["lane"]
    for stop in obj["stop_line"]:
        assert stop["ped_crossing_tokens"][0] in tokens["ped_crossing"]


def test_polygons_are_valid_and_lanes_tile_the_road(written: tuple[pathlib.Path, dict]) -> None:
    _, obj = written
    assert all(_polygon(obj, p["token"]).is_valid for p in obj["polygon"])
    segment = obj["road_segment"][3]
    lanes = [lane for lane in obj["lane"] if _polygon(obj, lane["polygon_token"]).within(
        _polygon(obj, segment["polygon_token"]).buffer(0.01))]  # fmt: skip
    assert len(lanes) == 3
    area = sum(_polygon(obj, lane["polygon_token"]).area for lane in lanes)
    assert area == pytest.approx(_polygon(obj, segment["polygon_token"]).area, rel=0.01)


def test_ego_route_runs_along_the_centre_of_a_lane(written: tuple[pathlib.Path, dict]) -> None:
    _, obj = written
    route = _routes()[0]
    starts = [p["start_pose"] for paths in obj["arcline_path_3"].values() for p in paths]
    for x, y, yaw in route[::8]:
        near = min(starts, key=lambda s: math.hypot(s[0] - x, s[1] - y) - 10 * math.cos(s[2] - yaw))
        assert math.hypot(near[0] - x, near[1] - y) < 2.6  # an arc starts every 5 m
        assert math.cos(near[2] - yaw) > 0.99


def test_the_oncoming_lane_runs_the_other_way(written: tuple[pathlib.Path, dict]) -> None:
    _, obj = written
    route = _routes()[0]
    x, y, yaw = route[0]
    for paths in obj["arcline_path_3"].values():
        start = paths[0]["start_pose"]
        left = -math.sin(yaw) * (start[0] - x) + math.cos(yaw) * (start[1] - y)
        if abs(left - maps.LANE) < 0.2 and math.hypot(start[0] - x, start[1] - y) < 30:
            assert math.cos(start[2] - yaw) < -0.99
            return
    pytest.fail("no oncoming lane beside the route's start")


def test_same_routes_same_file(tmp_path: pathlib.Path) -> None:
    first = maps.write_expansion(tmp_path / "a", "boston-seaport", _routes()).read_bytes()
    second = maps.write_expansion(tmp_path / "b", "boston-seaport", _routes()).read_bytes()
    assert first == second


def test_no_route_is_an_empty_map(tmp_path: pathlib.Path) -> None:
    obj = json.loads(maps.write_expansion(tmp_path, "singapore-onenorth", []).read_text())
    assert all(obj[layer] == [] for layer in maps.LAYERS)
    assert obj["canvas_edge"] == list(maps.CANVAS["singapore-onenorth"])


@pytest.mark.parametrize(
    ("location", "routes", "error", "match"),
    [
        ("boston", [], ValueError, "location: expected one of"),
        ("boston-seaport", np.zeros((4, 3)), TypeError, "routes: expected a list"),
        ("boston-seaport", [np.zeros((4, 2))], ValueError, r"routes\[0\]: expected shape"),
        ("boston-seaport", [[[0, 0, 0], [1, 0, 0]]], TypeError, r"routes\[0\]: expected a numpy"),
        ("boston-seaport", [np.full((3, 3), np.nan)], ValueError, "expected finite"),
    ],
)
def test_bad_input(
    tmp_path: pathlib.Path, location: str, routes: object, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        maps.write_expansion(tmp_path, location, routes)  # type: ignore[arg-type]


def test_bad_location_key(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="routes: expected keys among"):
        maps.write_expansions(tmp_path, {"boston": []})


DEVKIT_CHECK = """
import json, sys
import numpy as np
from nuscenes.map_expansion.map_api import NuScenesMap, NuScenesMapExplorer, locations
root, x, y, yaw = sys.argv[1], *map(float, sys.argv[2:5])
for name in locations:
    NuScenesMapExplorer(NuScenesMap(root, name))
nmap = NuScenesMap(root, "boston-seaport")
patch = (x - 30, y - 15, x + 30, y + 15)
found = nmap.get_records_in_patch(patch, nmap.non_geometric_layers, mode="intersect")
lane = nmap.get_closest_lane(x, y, radius=3)
points = np.array(nmap.discretize_lanes([lane], 0.5)[lane])
lines = nmap.explorer._get_layer_line((x, y, 30, 60), np.degrees(yaw), "lane_divider")
masks = nmap.get_map_mask((x, y, 30, 60), np.degrees(yaw), ["drivable_area", "road_divider"],
                          canvas_size=(60, 30))
print(json.dumps({
    "found": {k: len(v) for k, v in found.items()},
    "arcs": len(nmap.get_arcline_path(lane)),
    "outgoing": len(nmap.get_outgoing_lane_ids(lane)),
    "incoming": len(nmap.get_incoming_lane_ids(lane)),
    "distance": float(np.linalg.norm(points[:, :2] - [x, y], axis=1).min()),
    "divider_length": sum(line.length for line in lines if not line.is_empty),
    "mask_pixels": [int(m.sum()) for m in masks],
    "on_point": nmap.layers_on_point(x, y)["lane"] == lane,
}))
"""


@pytest.mark.parametrize("target", TARGETS, ids=lambda p: p.name)
def test_devkit_reads_the_map(written: tuple[pathlib.Path, dict], target: pathlib.Path) -> None:
    if not (target / "nuscenes" / "map_expansion" / "map_api.py").is_file():
        pytest.skip(f"no nuscenes-devkit in {target}")
    root, _ = written
    x, y, yaw = _routes()[0][22]  # 104 m along the corridor: inside a piece
    env = {**os.environ, "PYTHONPATH": str(target), "MPLBACKEND": "Agg"}
    args = [sys.executable, "-c", DEVKIT_CHECK, str(root), str(x), str(y), str(yaw)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    found = result["found"]
    assert found["lane"] >= 6 and found["road_segment"] >= 3 and found["ped_crossing"] >= 1
    assert found["road_divider"] >= 3 and found["lane_divider"] >= 3 and found["walkway"] >= 6
    assert result["arcs"] == 4 and result["outgoing"] == 1 and result["incoming"] == 1
    assert result["distance"] < 0.3
    assert result["divider_length"] == pytest.approx(60.0, abs=1.0)
    assert result["mask_pixels"][0] > 0.3 * 60 * 30 and result["mask_pixels"][1] > 0
    assert result["on_point"]


def test_patch_geometry_helpers_agree(written: tuple[pathlib.Path, dict]) -> None:
    _, obj = written
    x, y, _ = _routes()[0][20]
    patch = box(x - 30, y - 15, x + 30, y + 15)
    lines = [LineString(_xy(obj, next(li for li in obj["line"] if li["token"] == r["line_token"])[
        "node_tokens"])) for r in obj["road_divider"]]  # fmt: skip
    assert any(line.intersects(patch) for line in lines)
