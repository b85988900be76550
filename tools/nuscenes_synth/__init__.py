"""A small synthetic dataset in nuScenes' own format, written on demand.

`python tools/synthetic_nuscenes.py --out data/nuscenes` writes what the camera and lidar
detectors of the mmdet3d era read from a nuScenes download, at a few kilobytes per frame:
the metadata tables of ``v1.0-trainval`` and ``v1.0-test`` (or ``v1.0-mini``), six camera
images and one lidar sweep per frame, the CAN bus poses and a vector map of the route. A
repository's own ``tools/create_data.py nuscenes`` turns it into the info files its configs
name, and its evaluation runs nuScenes' own metric on it, so an install can be checked end
to end without the 400 GB download.

Modules:
    world: the scene content (ego route, objects, the sensor rig), pure geometry.
    tables: the nuScenes tables of one dataset version.
    sensors: the camera images and lidar sweeps those tables name.
    can_bus: the CAN bus messages of each scene.
    maps: the semantic prior masks and the map expansion of each location.
"""
