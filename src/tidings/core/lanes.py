"""Lanes: the order in which a channel's ready messages are taken.

A channel's queue holds its messages in lanes, first lane first: by default
``transactional`` (what ``notify`` and the publish route admit) ahead of ``bulk``
(campaigns and digests), so a password reset never waits behind a digest's backlog.
A message's lane is a small number stored with its intent and its queue message: the
position of the lane's name in the channel's ``lanes`` when it was admitted. Only the
order of receiving changes; pacing stays one gate over every lane.

Strict order would starve a lower lane while a higher one is busy, so every lane after
the first keeps a share of what is taken while it has work (``LaneShare``): each
message taken from another lane earns it ``share / (1 - share)`` of a message, and
the next receive first asks it alone for the whole messages it is owed, no more. A
lane found with nothing ready loses what it was owed: an idle lane banks no credit.

A queue keeps at most ``MAX_LANES`` lanes, and a receive that has room left asks every
lane up to that bound after the configured ones, so a message admitted under an older,
longer ``lanes`` list is still received (last), never stranded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType

from tidings.core.keys import is_key_part

#: The most lanes a channel may have; numbers past a channel's own list are received last.
MAX_LANES = 4
TRANSACTIONAL = "transactional"
BULK = "bulk"
DEFAULT_LANES = (TRANSACTIONAL, BULK)
DEFAULT_MIN_SHARE = 0.1


class ChannelLanes(Mapping[str, Sequence[str]]):
    """Each channel's lane names (a channel not in it has ``DEFAULT_LANES``), and the
    channels that share their lanes among groups (``fair``: ``tidings.core.fair``)."""

    def __init__(self, lanes: Mapping[str, Sequence[str]] | None = None,
                 fair: Iterable[str] = ()) -> None:
        self._lanes = MappingProxyType({k: tuple(v) for k, v in (lanes or {}).items()})
        self.fair = frozenset(fair)

    def __getitem__(self, channel: str) -> Sequence[str]:
        return self._lanes[channel]

    def __iter__(self) -> Iterator[str]:
        return iter(self._lanes)

    def __len__(self) -> int:
        return len(self._lanes)

    def group(self, channel: str, group: str | None) -> str:
        """The group an intent of ``channel`` is written with: ``group`` where the
        channel shares its lanes among groups, else none (``''``)."""
        return (group or "") if channel in self.fair else ""


NO_LANES = ChannelLanes()
#: Every lane number in order: what a receive asks when the caller names no order.
EVERY_LANE = tuple(range(MAX_LANES))


def check_lane_names(lanes: list[str]) -> list[str]:
    """A channel's lanes as settings take them: 1 to ``MAX_LANES`` distinct names, each
    a name a key could hold; ValueError says what is wrong."""
    if not 1 <= len(lanes) <= MAX_LANES:
        raise ValueError(f"a channel has 1 to {MAX_LANES} lanes, not {len(lanes)}")
    for name in lanes:
        if not is_key_part(name):
            raise ValueError(f"lane {name!r} must be a non-empty name without '/', "
                             "whitespace or control characters")
    if len(set(lanes)) != len(lanes):
        raise ValueError(f"names a lane twice: {lanes}")
    return lanes


def lane_number(lanes: Sequence[str], name: str | None, *, bulk: bool) -> int:
    """The stored number of lane ``name`` of a channel whose lanes are ``lanes``.

    ``None`` is the default for the kind of admission: ``transactional`` for a call
    (``bulk=False``), ``bulk`` for a campaign or a digest, and where the channel has no
    lane of that name, its first or its last lane. A name the channel does not have
    raises ValueError naming the lanes it has (settings are checked before this runs).
    """
    if not lanes:
        return 0
    if name is None:
        wanted = BULK if bulk else TRANSACTIONAL
        if wanted in lanes:
            return lanes.index(wanted)
        return len(lanes) - 1 if bulk else 0
    if name not in lanes:
        raise ValueError(f"lane {name!r} is not one of this channel's lanes {list(lanes)}")
    return lanes.index(name)


def lane_name(lanes: Sequence[str], number: int) -> str:
    """The name of lane ``number`` of a channel whose lanes are ``lanes``; ``lane <n>``
    for a number past them (a message of an older, longer list)."""
    return lanes[number] if 0 <= number < len(lanes) else f"lane {number}"


class LaneShare:
    """Which lanes a worker asks, in what order and for how many, so each lower lane
    keeps ``min_share`` of what is taken while it has work (see the module's
    docstring). One per worker: the shares hold over what each worker takes, and so
    over their sum."""

    def __init__(self, lanes: int, min_share: float = DEFAULT_MIN_SHARE) -> None:
        if not 1 <= lanes <= MAX_LANES:
            raise ValueError(f"a channel has 1 to {MAX_LANES} lanes, not {lanes}")
        if not 0.0 <= min_share < 1.0:
            raise ValueError(f"min_share must be at least 0 and below 1, not {min_share}")
        self.lanes = lanes
        self._earn = min_share / (1.0 - min_share)
        #: Messages each lane is owed (the first lane is never owed: it leads).
        self._owed = [0.0] * lanes

    def plan(self, limit: int) -> list[tuple[tuple[int, ...], int]]:
        """The receives to make for ``limit`` messages: ``(lanes in order, at most)``.
        A lane owed whole messages is asked alone first, for what it is owed and no
        more (so a lower lane never takes a whole batch ahead of the first one); then
        every lane in order for the rest."""
        steps: list[tuple[tuple[int, ...], int]] = []
        left = limit
        for lane in range(1, self.lanes):
            owed = min(int(self._owed[lane]), left)
            if owed >= 1:
                steps.append(((lane,), owed))
                left -= owed
        if left > 0:
            steps.append((EVERY_LANE, left))
        return steps

    def took(self, asked: Sequence[int], taken: Iterable[int], *, limit: int) -> None:
        """Count a receive of at most ``limit`` that asked ``asked`` in that order and
        took messages of the ``taken`` lanes. A lane that gave nothing had nothing ready
        when the receive came up short or a lane asked after it gave some: it is idle,
        and banks nothing."""
        counts = [0] * MAX_LANES
        for lane in taken:
            counts[min(lane, MAX_LANES - 1)] += 1
        total = sum(counts)
        last_giving = max((i for i, lane in enumerate(asked) if counts[lane]), default=-1)
        for lane in range(1, self.lanes):
            mine = counts[lane]
            if lane in asked and mine == 0 and (
                    total < limit or asked.index(lane) < last_giving):
                self._owed[lane] = 0.0
                continue
            self._owed[lane] = max(0.0, self._owed[lane] + self._earn * (total - mine) - mine)
