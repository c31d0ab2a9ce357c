"""Status codes shared with the ``.lua`` files (first element of each script's reply)."""

GRANTED = 1
HELD = 0
LOST = -1
RELEASED = 1
