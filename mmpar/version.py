"""The version of mmpar, in a leaf module that every part may import.

The one place it is written: ``pyproject.toml`` reads it from here
(``[tool.setuptools.dynamic]``), and so does the documentation (``docs/conf.py``).
"""

__version__ = "0.1.0"
