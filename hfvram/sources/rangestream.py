"""A forward-only file-like view of a remote file, fetched in growing Range windows.

Each window starts where the previous one stopped (nothing is fetched twice), is twice the size of the
previous one, and bytes already handed to the reader are forgotten. A hard cap bounds the total.
"""

from __future__ import annotations

from collections.abc import Callable

from hfvram.errors import MalformedFileError

#: fetch(start, length) -> up to `length` bytes starting at `start` (fewer only at end of file)
RangeFetcher = Callable[[int, int], bytes]


class RangeStream:
    """``read(n)`` over a remote file; fetches ``first_window`` bytes, then doubling windows up to ``max_window``."""

    def __init__(
        self,
        fetch: RangeFetcher,
        *,
        filename: str,
        cap: int,
        size: int | None = None,
        first_window: int = 1024 * 1024,
        max_window: int = 16 * 1024 * 1024,
    ) -> None:
        self._fetch = fetch
        self._filename = filename
        self._cap = cap
        self._size = size
        self._window = first_window
        self._max_window = max_window
        self._buffer = bytearray()
        self._start = 0  # index in the buffer of the next unread byte
        self._position = 0  # bytes handed to the reader
        self._fetched = 0  # bytes received from the server (file offset of the buffer's end)
        self._eof = False

    @property
    def bytes_fetched(self) -> int:
        return self._fetched

    def tell(self) -> int:
        return self._position

    def _fill(self, wanted: int) -> None:
        while len(self._buffer) - self._start < wanted and not self._eof:
            length = self._window
            if self._size is not None:
                length = min(length, self._size - self._fetched)
            length = min(length, self._cap - self._fetched)
            if length <= 0:
                if self._size is not None and self._fetched >= self._size:
                    self._eof = True
                    break
                raise MalformedFileError(
                    f"header not finished within the {self._cap // (1024 * 1024)} MiB read cap", file=self._filename
                )
            chunk = self._fetch(self._fetched, length)
            if len(chunk) > length:
                chunk = chunk[:length]
            del self._buffer[: self._start]  # forget consumed bytes before growing
            self._start = 0
            self._buffer += chunk
            self._fetched += len(chunk)
            if len(chunk) < length:
                self._eof = True
            self._window = min(self._window * 2, self._max_window)

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            raise ValueError("RangeStream.read needs a size: the remote file is never read whole")
        self._fill(n)
        if len(self._buffer) - self._start < n:
            raise MalformedFileError(f"file ends after {self._fetched} bytes, inside its header", file=self._filename)
        out = bytes(self._buffer[self._start : self._start + n])
        self._start += n
        self._position += n
        return out
