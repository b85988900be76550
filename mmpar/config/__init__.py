"""Configuration: Python or JSON config files with ``_base_`` inheritance, the
attribute-access dict they load into, and ``--cfg-options key=value`` overrides."""

from mmpar.config.config import Config, apply_custom_imports
from mmpar.config.config_dict import DELETE_KEY, ConfigDict
from mmpar.config.dict_action import DictAction, parse_option_value

__all__ = [
    "DELETE_KEY",
    "Config",
    "ConfigDict",
    "DictAction",
    "apply_custom_imports",
    "parse_option_value",
]
