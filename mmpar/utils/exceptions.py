"""Reword an exception without changing its type."""

from __future__ import annotations

__all__ = ["with_prefix"]


def with_prefix(exc: Exception, prefix: str) -> Exception:
    """A new exception of ``exc``'s type whose message is ``prefix: message``.

    Exceptions whose constructor does not take one message come back unchanged.
    """
    message = exc.args[0] if isinstance(exc, KeyError) and len(exc.args) == 1 else str(exc)
    try:
        new = type(exc)(f"{prefix}: {message}")
    except Exception:
        return exc
    return new
