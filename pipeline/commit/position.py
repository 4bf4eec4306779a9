"""Where a piece of branch work sits: the value that travels from a record to its commit's trailers.

A commit claims the last branch-work record it applied with its `Reverser-Branch` and
`Reverser-Offset` trailers; the four values that make that claim (the FIFO's provider and branch,
the record's partition and offset) always travel together, so they are one value here.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["LogPosition", "Offset"]

#: (partition, offset) of one branch-work record: what the consumer settles and commits.
Offset = tuple[int, int]


class LogPosition(NamedTuple):
    """A branch-work record of one FIFO: (provider, branch) names the FIFO, (partition, offset) the record."""

    provider: str
    branch: str
    partition: int
    offset: int

    @classmethod
    def at(cls, provider: str, branch: str, offset: Offset) -> LogPosition:
        """The position of the record at `(partition, offset)` of the FIFO `(provider, branch)`."""
        return cls(provider, branch, offset[0], offset[1])

    @property
    def record(self) -> Offset:
        """`(partition, offset)`: the part the consumer settles."""
        return (self.partition, self.offset)
