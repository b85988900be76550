"""The version of mmpar, in a leaf module that every part may import."""

__version__ = "0.1.0"
