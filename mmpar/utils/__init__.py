"""Small helpers that every other part of mmpar may import: argument checks and
exception rewording. Nothing here imports the rest of mmpar."""

from mmpar.utils.checks import check_positive_int, is_int, is_number
from mmpar.utils.exceptions import with_prefix

__all__ = ["check_positive_int", "is_int", "is_number", "with_prefix"]
