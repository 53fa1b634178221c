"""A forward-only file-like view of a remote file, fetched in Range windows sized from what has been parsed.

Each window starts where the previous one stopped (nothing is fetched twice) and bytes already handed to the
reader are forgotten. A reader that can tell where the header it parses is expected to end
(``set_end_estimate``: the GGUF reader, from the counts it has parsed) gets windows reaching that end plus a
margin; otherwise each window is twice the previous one. A hard cap bounds the total.

The first window and the margin were picked with ``benchmarks/gguf_windows.py`` over the corpus headers.
"""

from __future__ import annotations

from collections.abc import Callable

from hfvram.errors import MalformedFileError

KIB = 1024
#: the first Range: the fixed part and first metadata of every corpus GGUF header, the start of its vocabulary
#: (enough strings for a running mean) and the whole of a header without vocabulary of up to ~1,100 tensors
FIRST_WINDOW = 64 * KIB
#: a window sized from an estimate reaches past it by this fraction plus ``ESTIMATE_SLACK`` bytes
ESTIMATE_MARGIN = 0.08
ESTIMATE_SLACK = 8 * KIB


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
        first_window: int = FIRST_WINDOW,
        max_window: int = 16 * 1024 * 1024,
        margin: float = ESTIMATE_MARGIN,
        slack: int = ESTIMATE_SLACK,
    ) -> None:
        self._fetch = fetch
        self._filename = filename
        self._cap = cap
        self._size = size
        self._window = first_window
        self._max_window = max_window
        self._margin = margin
        self._slack = slack
        self._buffer = bytearray()
        self._start = 0  # index in the buffer of the next unread byte
        self._position = 0  # bytes handed to the reader
        self._fetched = 0  # bytes received from the server (file offset of the buffer's end)
        self._eof = False
        self._end_estimate: Callable[[], int] | None = None
        self.requests = 0

    def set_end_estimate(self, estimate: Callable[[], int]) -> None:
        """Size later windows from ``estimate()``: the file offset where the reader expects its header to end."""
        self._end_estimate = estimate

    def _next_length(self, wanted: int) -> int:
        if self._end_estimate is None or self.requests == 0:
            return self._window
        expected = self._end_estimate() - self._fetched
        return max(wanted, int(expected * (1 + self._margin)) + self._slack)

    def available(self) -> int:
        """Bytes that can be read without a request."""
        return len(self._buffer) - self._start

    @property
    def bytes_fetched(self) -> int:
        return self._fetched

    def tell(self) -> int:
        return self._position

    def _fill(self, wanted: int) -> None:
        while len(self._buffer) - self._start < wanted and not self._eof:
            length = self._next_length(wanted - (len(self._buffer) - self._start))
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
            self.requests += 1
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
