"""The nuScenes map expansion of the synthetic world: a road corridor along each ego route.

`write_expansion` writes ``maps/expansion/<location>.json`` in the schema nuScenes-devkit's
``NuScenesMap`` reads (map version 1.3): the geometric layers ``node``, ``line`` and
``polygon``, and the semantic layers that name them. Each route becomes a two-way road,
in 20 m pieces (one road segment each), with right-hand traffic:

    offset (m, left of travel)   what lies there
    +5.25 .. +8.25               walkway
    +1.75 .. +5.25               oncoming lane (road block of the oncoming direction)
    +1.75                        road divider
    -1.75 .. +1.75               the ego's lane
    -1.75                        lane divider
    -5.25 .. -1.75               the right lane
    -8.25 .. -5.25               walkway
    -18   .. -9                  a car park beside the second piece

Every second piece starts with a 4 m pedestrian crossing over the whole road, with a stop
line before it in the ego's direction. Lanes carry their arcline paths (one arc per 5 m)
and their successors in ``connectivity``; the road is extended 60 m straight beyond both
ends of the route so that map patches around the first and last poses are full.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np

from nuscenes_synth import map_geometry as geo

LOCATIONS = (
    "singapore-onenorth",
    "singapore-hollandvillage",
    "singapore-queenstown",
    "boston-seaport",
)
# The real maps' extents in metres (width, height); a canvas grows to hold every route.
CANVAS = {
    "singapore-onenorth": (1585.6, 2025.0),
    "singapore-hollandvillage": (2808.3, 2922.9),
    "singapore-queenstown": (3228.6, 3687.1),
    "boston-seaport": (2979.5, 2118.1),
}
LAYERS = (
    "node", "line", "polygon", "drivable_area", "road_segment", "road_block", "lane",
    "ped_crossing", "walkway", "stop_line", "carpark_area", "road_divider", "lane_divider",
    "traffic_light", "lane_connector",
)  # fmt: skip
LANE = 3.5  # lane width in metres
EDGE = 1.5 * LANE  # the kerb's offset
WALK = 3.0  # walkway width
PIECE = 20  # metres (centre-line samples) per road segment
ARC = 5  # metres per arcline path
EXTENSION = 60.0
# (centre offset, travels with the route?) of each lane
LANES = ((0.0, True), (-LANE, True), (LANE, False))


class _Map:
    """The growing tables of one location's map, with deterministic tokens."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.tables: dict[str, list[dict]] = {name: [] for name in LAYERS}
        self.arcline_path_3: dict[str, list[dict]] = {}
        self.connectivity: dict[str, dict[str, list[str]]] = {}
        self._count = 0

    def token(self) -> str:
        """A fresh 32-hex token, the same on every run."""
        self._count += 1
        return hashlib.md5(f"map/{self.location}/{self._count}".encode()).hexdigest()

    def add(self, layer: str, **fields: object) -> str:
        """Append a record with a fresh token to ``layer``; returns the token."""
        record = {"token": self.token(), **fields}
        self.tables[layer].append(record)
        return record["token"]

    def nodes(self, points: np.ndarray) -> list[str]:
        """One node per (K, 2) point; their tokens in order."""
        return [self.add("node", x=float(x), y=float(y)) for x, y in points]

    def line(self, points: np.ndarray) -> tuple[str, list[str]]:
        """A line through the (K, 2) points; its token and its node tokens."""
        node_tokens = self.nodes(points)
        return self.add("line", node_tokens=node_tokens), node_tokens

    def polygon(self, ring: np.ndarray) -> str:
        """A polygon with the (K, 2) exterior ring and no holes; its token."""
        return self.add("polygon", exterior_node_tokens=self.nodes(ring), holes=[])

    def json(self, canvas_edge: tuple[float, float]) -> dict:
        """The whole map as the expansion's json object."""
        out: dict = {"version": "1.3", "canvas_edge": list(canvas_edge)}
        out.update(self.tables)
        out["arcline_path_3"] = self.arcline_path_3
        out["connectivity"] = self.connectivity
        return out


def _piece_bounds(num_samples: int) -> list[tuple[int, int]]:
    """Sample index ranges ``[a, b]`` (ends shared) of the 20 m pieces of a centre line."""
    starts = list(range(0, num_samples - 1, PIECE))
    return [(a, min(a + PIECE, num_samples - 1)) for a in starts if num_samples - 1 - a >= 2]


def _lane(m: _Map, xy: np.ndarray, yaw: np.ndarray, centre: float, forward: bool) -> str:
    """One lane record over the piece ``xy``/``yaw`` (K samples), with its arcline paths."""
    half = LANE / 2
    polygon = m.polygon(geo.strip(xy, yaw, centre + half, centre - half))
    idx = sorted(set(range(0, len(xy), ARC)) | {len(xy) - 1})
    centre_xy, heading = geo.offset(xy, yaw, centre)[idx], yaw[idx]
    if not forward:
        centre_xy, heading = centre_xy[::-1], heading[::-1] + np.pi
    left, right = (centre + half, centre - half) if forward else (centre - half, centre + half)
    left_nodes = m.nodes(geo.offset(xy, yaw, left)[idx])
    right_nodes = m.nodes(geo.offset(xy, yaw, right)[idx])
    ends = [geo.strip(xy[i : i + 1], yaw[i : i + 1], centre + half, centre - half) for i in (0, -1)]
    from_edge, _ = m.line(ends[0] if forward else ends[1])
    to_edge, _ = m.line(ends[1] if forward else ends[0])
    token = m.add(
        "lane",
        polygon_token=polygon,
        lane_type="CAR",
        from_edge_line_token=from_edge,
        to_edge_line_token=to_edge,
        left_lane_divider_segments=[{"node_token": t, "segment_type": "NIL"} for t in left_nodes],
        right_lane_divider_segments=[{"node_token": t, "segment_type": "NIL"} for t in right_nodes],
    )
    poses = np.concatenate([centre_xy, heading[:, None]], axis=1)
    m.arcline_path_3[token] = geo.arcline_paths(poses)
    m.connectivity[token] = {"incoming": [], "outgoing": []}
    return token


def _connect(m: _Map, first: str, second: str) -> None:
    """``second`` follows ``first``."""
    m.connectivity[first]["outgoing"].append(second)
    m.connectivity[second]["incoming"].append(first)


def _road_piece(m: _Map, xy: np.ndarray, yaw: np.ndarray, area: str) -> dict[str, object]:
    """The road segment, road blocks, dividers, walkways and lanes of one piece."""
    segment = m.add(
        "road_segment",
        polygon_token=m.polygon(geo.strip(xy, yaw, EDGE, -EDGE)),
        is_intersection=False,
        drivable_area_token=area,
    )
    blocks = []
    for left, right, forward in ((LANE / 2, -EDGE, True), (EDGE, LANE / 2, False)):
        ends = [geo.strip(xy[i : i + 1], yaw[i : i + 1], left, right) for i in (0, -1)]
        blocks.append(
            m.add(
                "road_block",
                polygon_token=m.polygon(geo.strip(xy, yaw, left, right)),
                from_edge_line_token=m.line(ends[0] if forward else ends[1])[0],
                to_edge_line_token=m.line(ends[1] if forward else ends[0])[0],
                road_segment_token=segment,
            )
        )
    m.add(
        "road_divider",
        line_token=m.line(geo.offset(xy, yaw, LANE / 2))[0],
        road_segment_token=segment,
    )
    line, nodes = m.line(geo.offset(xy, yaw, -LANE / 2))
    segments = [{"node_token": t, "segment_type": "DOUBLE_DASHED_WHITE"} for t in nodes]
    m.add("lane_divider", line_token=line, lane_divider_segments=segments)
    for left, right in ((EDGE + WALK, EDGE), (-EDGE, -EDGE - WALK)):
        m.add("walkway", polygon_token=m.polygon(geo.strip(xy, yaw, left, right)))
    lanes = [_lane(m, xy, yaw, centre, forward) for centre, forward in LANES]
    return {"segment": segment, "forward_block": blocks[0], "lanes": lanes}


def _crossing(m: _Map, xy: np.ndarray, yaw: np.ndarray, a: int, piece: dict, before: dict) -> None:
    """A 4 m pedestrian crossing from sample ``a`` and the stop line 1 m before it."""
    crossing = m.add(
        "ped_crossing",
        polygon_token=m.polygon(geo.strip(xy[a : a + 5], yaw[a : a + 5], EDGE, -EDGE)),
        road_segment_token=piece["segment"],
    )
    m.add(
        "stop_line",
        polygon_token=m.polygon(geo.strip(xy[a - 2 : a], yaw[a - 2 : a], LANE / 2, -EDGE)),
        stop_line_type="PED_CROSSING",
        ped_crossing_tokens=[crossing],
        traffic_light_tokens=[],
        road_block_token=before["forward_block"],
    )


def _corridor(m: _Map, route: np.ndarray) -> None:
    """All records of the road along one route."""
    xy, yaw = geo.centre_line(route, EXTENSION)
    area = m.add("drivable_area", polygon_tokens=[m.polygon(geo.strip(xy, yaw, EDGE, -EDGE))])
    pieces = []
    for i, (a, b) in enumerate(_piece_bounds(len(xy))):
        piece = _road_piece(m, xy[a : b + 1], yaw[a : b + 1], area)
        if pieces:
            previous = pieces[-1]
            for k, (_, forward) in enumerate(LANES):
                first, second = previous["lanes"][k], piece["lanes"][k]
                _connect(m, first, second) if forward else _connect(m, second, first)
            if i % 2 == 1 and b - a >= 5:
                _crossing(m, xy, yaw, a, piece, previous)
            if i == 1:
                ring = geo.strip(xy[a : b + 1], yaw[a : b + 1], -EDGE - WALK - 0.75, -18.0)
                m.add(
                    "carpark_area",
                    polygon_token=m.polygon(ring),
                    orientation=float(geo.wrap(float(yaw[a]))),
                    road_block_token=piece["forward_block"],
                )
        pieces.append(piece)


def _canvas(location: str, routes: list[np.ndarray]) -> tuple[float, float]:
    """The real map's extent, grown to hold every route with a 200 m margin."""
    width, height = CANVAS[location]
    for route in routes:
        width = max(width, float(route[:, 0].max()) + 200.0)
        height = max(height, float(route[:, 1].max()) + 200.0)
    return round(width, 1), round(height, 1)


def write_expansion(root: pathlib.Path, location: str, routes: list[np.ndarray]) -> pathlib.Path:
    """Write ``root/maps/expansion/<location>.json``: a road corridor along each route.

    Args:
        root: the dataset root (the folder holding ``maps/`` and ``v1.0-*``).
        location: one of LOCATIONS (nuScenes' four map names).
        routes: each an (N >= 2, 3) array of global ``x, y, yaw`` (radians) of one scene's
            ego route, e.g. ``world.route(scene, seconds)``; none gives an empty map that
            still loads (research code opens all four locations).

    Returns:
        The path of the json written.
    """
    if location not in LOCATIONS:
        raise ValueError(f"location: expected one of {', '.join(LOCATIONS)}, found {location!r}")
    if not isinstance(routes, (list, tuple)):
        raise TypeError(f"routes: expected a list of (N, 3) arrays, found {type(routes).__name__}")
    checked = [geo.check_route(route, i) for i, route in enumerate(routes)]
    m = _Map(location)
    for route in checked:
        _corridor(m, route)
    path = pathlib.Path(root) / "maps" / "expansion" / f"{location}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(m.json(_canvas(location, checked))))
    return path


def write_expansions(root: pathlib.Path, routes: dict[str, list[np.ndarray]]) -> list[pathlib.Path]:
    """Write the expansion of all four locations; those missing from ``routes`` are empty."""
    unknown = sorted(set(routes) - set(LOCATIONS))
    if unknown:
        raise ValueError(f"routes: expected keys among {', '.join(LOCATIONS)}, found {unknown}")
    return [write_expansion(root, loc, list(routes.get(loc, []))) for loc in LOCATIONS]
