"""Generated tokens' bytes as text deltas that never split a UTF-8 character and never show a stop string.

TextStream(stops).feed(token_bytes) returns the text that is safe to send now: bytes of an unfinished character
wait for the rest, and a tail that could be the start of a stop string waits until it is known not to be one.
When a stop string appears, feed returns the text before it and `stopped` turns true; what follows is dropped.
finish() returns what was held back once generation ends without a stop string.

    s = TextStream(["\\n\\n"]);  s.feed(b"Hi\\n") -> "Hi";  s.feed(b"\\nmore") -> "";  s.stopped -> True

Pure; not thread-safe (one per generation).
"""

import codecs


class TextStream:
    def __init__(self, stops=()):
        self._stops = tuple(s for s in stops if s)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self.stopped = False

    def feed(self, data):
        """The text that `data` (a token's bytes) makes safe to send; "" once stopped."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(data)
        return self._release()

    def finish(self):
        """Everything held back (an unfinished character becomes U+FFFD); "" once stopped."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(b"", final=True)
        text, self._pending = self._pending, ""
        return text

    def _release(self):
        found = [i for i in (self._pending.find(s) for s in self._stops) if i >= 0]
        if found:
            text = self._pending[:min(found)]
            self._pending = ""
            self.stopped = True
            return text
        hold = self._longest_stop_prefix_suffix()
        cut = len(self._pending) - hold
        text, self._pending = self._pending[:cut], self._pending[cut:]
        return text

    def _longest_stop_prefix_suffix(self):
        """The length of the longest end of the pending text that a stop string starts with."""
        longest = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(self._pending)), longest, -1):
                if self._pending.endswith(stop[:k]):
                    longest = k
                    break
        return longest
