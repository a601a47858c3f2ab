"""Integer helpers the families' spaces share.

>>> pow2_at_least(1), pow2_at_least(20), pow2_at_least(64)
(1, 32, 64)
"""

from __future__ import annotations


def pow2_at_least(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1): a block or vector no wider than a size needs."""
    return 1 << max(0, int(x) - 1).bit_length()
