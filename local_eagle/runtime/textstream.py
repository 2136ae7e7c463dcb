"""Turning token pieces into streamed text: whole UTF-8 characters only, stop strings withheld."""

from __future__ import annotations

import codecs


class TextStream:
    """Accumulates token bytes; hands out text that is safe to show now.

    A multibyte character split across tokens is held until complete, and any tail that could
    still grow into a stop string is held until it cannot; a completed stop string ends the
    stream and is never emitted.
    """

    def __init__(self, stop: list[str] | None = None) -> None:
        self.stop = [s for s in (stop or []) if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""
        self._emitted = 0
        self.stopped = False

    @property
    def text(self) -> str:
        """Everything emitted so far (the final text once the stream ends)."""
        return self._text[: self._emitted]

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the newly showable text ('' if none)."""
        if self.stopped:
            return ""
        self._text += self._decoder.decode(piece)
        return self._advance(final=False)

    def finish(self) -> str:
        """End of generation: release what was held back (an incomplete character becomes U+FFFD)."""
        if not self.stopped:
            self._text += self._decoder.decode(b"", final=True)
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        if self.stopped:
            return ""
        start = self._emitted
        search_from = max(0, start - max((len(s) for s in self.stop), default=0))
        cut = None
        for s in self.stop:
            i = self._text.find(s, search_from)
            if i != -1 and (cut is None or i < cut):
                cut = i
        if cut is not None:
            self.stopped = True
            self._text = self._text[:cut]
            end = max(cut, start)
        elif final:
            end = len(self._text)
        else:
            end = len(self._text) - self._held_tail()
        end = max(end, start)
        self._emitted = end
        return self._text[start:end]

    def _held_tail(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self._text)), best, -1):
                if self._text.endswith(s[:n]):
                    best = n
                    break
        return best
