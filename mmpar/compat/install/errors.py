"""The installer's one error type (its own module: it needs nothing but Python)."""

__all__ = ["InstallError"]


class InstallError(Exception):
    """A one-line reason the installer stops: printed as ``error: ...``, exit status 2."""
