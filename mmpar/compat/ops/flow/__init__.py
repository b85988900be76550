"""Machinery of mmpar's optical-flow ops: the tiled correlation of ``Correlation``."""
