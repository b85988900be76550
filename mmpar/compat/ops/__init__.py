"""mmpar's stand-in for ``mmcv.ops`` (being written: the modules land one by one)."""
