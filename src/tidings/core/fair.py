"""Fair share among groups inside a lane: one tenant's campaign never takes the quota.

A channel with ``fair_share`` splits each receive of a lane among the groups that have
messages in it (an intent's group key: a tenant, a sender domain; ``''`` is the group of
the messages that name none), in proportion to their weights (1 unless
``group_weights`` says otherwise), each group's share its oldest messages. Only groups
with messages are asked, so an idle group banks nothing; a group with fewer ready
messages than its share leaves the rest to the groups that filled theirs (a second
pass), so a receive is never short while any group has work. With more groups than
room, a receive takes one message from each of the next groups after those the last
receive visited (``FairShare.after``), so every group is reached in turn.

Pacing stays one gate over the sum: fairness decides which message goes next, the
pacer when.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

#: The group of the messages that name none.
NO_GROUP = ""


def split(groups: Sequence[str], room: int, weights: Mapping[str, float]) -> list[tuple[str, int]]:
    """``room`` messages shared among ``groups`` (in their order) in proportion to their
    weights (default 1), every group at least one while room allows (the largest shares
    give way), the rest by largest remainder. A group is left out (share 0) only when
    there are more groups than room."""
    if room <= 0 or not groups:
        return []
    if len(groups) >= room:
        return [(group, 1) for group in groups[:room]]
    weight = [max(weights.get(group, 1.0), 1e-9) for group in groups]
    total = sum(weight)
    exact = [room * w / total for w in weight]
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(groups)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in by_remainder[:room - sum(shares)]:
        shares[i] += 1
    for i, share in enumerate(shares):
        if share == 0:
            # No group starves on a small receive: the largest share gives one.
            shares[max(range(len(shares)), key=lambda j: (shares[j], -j))] -= 1
            shares[i] = 1
    return list(zip(groups, shares, strict=True))


class FairShare:
    """One worker's fair share of a channel's lanes among groups: the weights, and
    where each lane's last receive stopped (``after``), so the next starts past it."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self.weights = dict(weights or {})
        self._after: dict[int, str] = {}

    def after(self, lane: int) -> str:
        """The group the last receive of ``lane`` visited last (``''``: from the start)."""
        return self._after.get(lane, NO_GROUP)

    def visited(self, lane: int, last: str) -> None:
        self._after[lane] = last


#: Passes a receive makes over the groups of a lane: the first by share, the later
#: ones over the groups not reached or that filled their share, with the room left.
MAX_PASSES = 4


class Passes(Generic[T]):
    """The passes of one fair receive of a lane over ``groups`` (those with messages,
    in the order to ask them) for ``room`` messages: ``asks()`` the shares to take
    now, ``took()`` what each group gave; a group that gave less than its share has
    nothing more ready and is not asked again. ``rows()``: what was taken, one group
    at a time in turn."""

    def __init__(self, groups: Sequence[str], room: int, weights: Mapping[str, float]) -> None:
        self._pending = list(dict.fromkeys(groups))
        self._room = room
        self._weights = weights
        self._passes = 0
        self._asked: dict[str, int] = {}
        self._taken: dict[str, list[T]] = {}

    def asks(self) -> list[tuple[str, int]]:
        """The groups to ask now and how many each may give (none: done)."""
        if self._room <= 0 or not self._pending or self._passes >= MAX_PASSES:
            return []
        self._passes += 1
        shares = split(self._pending, self._room, self._weights)
        self._asked = dict(shares)
        return shares

    def took(self, given: Mapping[str, Sequence[T]]) -> None:
        """What each group asked gave (a group missing gave nothing)."""
        reached: list[str] = []
        left: list[str] = []
        for group in self._pending:
            if group not in self._asked:
                left.append(group)  # not reached: first in the next pass
                continue
            rows = list(given.get(group, ()))
            self._taken.setdefault(group, []).extend(rows)
            self._room -= len(rows)
            if len(rows) >= self._asked[group]:
                reached.append(group)  # it may have more
        self._pending = left + reached
        self._asked = {}

    def rows(self) -> list[T]:
        """What was taken, one from each group in turn (each group's oldest first)."""
        taken = list(self._taken.values())
        out: list[T] = []
        for i in range(max((len(rows) for rows in taken), default=0)):
            out += [rows[i] for rows in taken if i < len(rows)]
        return out
