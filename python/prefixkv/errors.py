"""The exceptions prefixkv raises: one class per C++ Status code.

Every failed call raises a subclass of :class:`Error` named after the Status
code (``InvalidArgument``, ``NotFound``, ...), carrying the code name in
``.code`` and the C++ message in ``.message``. Some also derive from the
matching builtin (``InvalidArgument`` is a ``ValueError``, ``NotFound`` a
``LookupError``, ``IOError`` an ``OSError``) so generic handlers catch them.
"""


class Error(Exception):
    """A prefixkv call failed. ``code``: the Status code name; ``message``: why."""

    def __init__(self, message: str, code: str = "Internal") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class NotFound(Error, LookupError):
    """The thing asked for is absent (a key, a directory)."""


class Corruption(Error):
    """Stored bytes failed a checksum or a consistency check."""


class InvalidArgument(Error, ValueError):
    """The input or the call is wrong: a bad dtype or shape, an unknown
    namespace, a closed engine."""


class IOError(Error, OSError):  # noqa: A001 - named after the Status code
    """The medium failed (read, write, sync)."""

    def __init__(self, message: str, code: str = "IOError") -> None:
        Error.__init__(self, message, code)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Busy(Error):
    """The thing is in use (a pinned block); retry later."""


class NoSpace(Error):
    """No room: a full budget, quota or disk; nothing changed."""


class NotSupported(Error):
    """A feature or layout this build does not handle."""


class Aborted(Error):
    """Cancelled by the caller."""


class Internal(Error):
    """A broken invariant inside prefixkv: always a bug."""


class Unavailable(Error):
    """A remote service did not answer in time or is down; retry later."""


class OutOfRange(Error, LookupError):
    """A position outside what is kept: an event log consumer must take a
    snapshot (Engine.event_snapshot) and resume from its seq + 1."""


__all__ = ["Error", "NotFound", "Corruption", "InvalidArgument", "IOError", "Busy",
           "NoSpace", "NotSupported", "Aborted", "Internal", "Unavailable",
           "OutOfRange"]
