"""A publish's intake: what one queue message (``POST /v1/queue/publish``) stands for.

A message names a queue and carries ``customer_id``, ``schedule_day`` and optionally
``template``, ``email``, ``phone`` and ``data`` (``PublishItem``). Its queue maps to a
campaign (its channels; the recipient from the message, else the campaign's audience)
or to one channel (the address from the message). The intents it stands for are keyed
by campaign, day, customer, channel and template version: for a campaign, the very keys
its scheduler would write, so a publish and a scheduled run of the same day never
deliver twice.

Plain values in, drafts out (``Published``); nothing here knows HTTP. A refusal is an
``InvalidInput`` naming the field (prefixed with ``where``), a ``VersionConflict`` for a
template version other than the campaign's. Writing the drafts is ``intake.admit_drafts``,
as for ``notify``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time
from typing import Any

from tidings.admission.audience import Audience
from tidings.admission.campaign import Campaign
from tidings.admission.scheduler import occurrence_id
from tidings.config.queues import QueueSettings
from tidings.core.errors import InvalidInput
from tidings.core.keys import campaign_key, check_json_text, queue_key, template_ref, validate_key
from tidings.core.lanes import DEFAULT_LANES, NO_LANES, ChannelLanes, lane_number
from tidings.core.model import IntentDraft, Recipient, address_kind, encode_data

_VERSIONED = re.compile(r"^(?P<base>.+?)[-/@_.]v(?P<version>[1-9][0-9]{0,5})$")
#: The fields of a message; any other is template data (``PublishItem.extras``).
_KNOWN = frozenset({"customer_id", "schedule_day", "template", "email", "phone", "data"})
#: Members looked at per attempt when finding a customer in a campaign's audience.
_LOOKUP_PAGE = 50

#: Why no send of a draft could ever go, as ``("template" | "address" | "data.<variable>",
#: problem)``, or None: the workers' send-time checks (``Composer.draft_problem``).
DraftProblem = Callable[[IntentDraft], "tuple[str, str] | None"]


class VersionConflict(InvalidInput):
    """A publish names a template version other than its campaign's: another version is
    another key, so a second send to a customer and day already sent."""


@dataclass(frozen=True, kw_only=True)
class PublishItem:
    """One message, as validated values (its shape is the caller's to check)."""

    customer_id: str
    schedule_day: str
    """YYYY-MM-DD."""
    template: str | None = None
    email: str | None = None
    phone: str | None = None
    data: Mapping[str, Any] | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)
    """The message's other fields: template data too (``data`` wins over them)."""


@dataclass(frozen=True, kw_only=True)
class Published:
    """What a message stands for, before anything is written."""

    queue: str
    campaign: str | None
    channel: str | None
    drafts: list[IntentDraft]
    skipped: dict[str, str]
    """Channels that get nothing, and why."""
    channels: tuple[str, ...]
    """Every channel the queue maps to (whose admission switches apply)."""

    @property
    def keys(self) -> list[str]:
        return [d.key for d in self.drafts]


# ---------------------------------------------------------------- mapping (no I/O)


def template_version(template: str) -> tuple[str, int] | None:
    """``weekly-digest-v3`` (or ``…/v3``, ``…@v3``, ``…_v3``, ``….v3``) -> ("weekly-digest", 3)."""
    match = _VERSIONED.match(template)
    return None if match is None else (match["base"], int(match["version"]))


def extra_data(item: PublishItem, member: Recipient | None, *, where: str = "") -> str:
    """Template data: the audience member's, then the message's extras, then ``data``."""
    data: dict[str, Any] = dict(member.data) if member is not None else {}
    extras = {k: v for k, v in item.extras.items() if k not in _KNOWN}
    data.update(extras)
    data.update(item.data or {})
    check_json_text(extras, f"{where}payload")
    check_json_text(item.data, f"{where}payload.data")
    return encode_data(data, f"{where}payload.data")


def campaign_drafts(campaign: Campaign, item: PublishItem, recipient: Recipient, *,
                    queue: str, now: float, kinds: Mapping[str, str], where: str = ""
                    ) -> tuple[list[IntentDraft], dict[str, str]]:
    """The intents a publish to a campaign queue stands for, and the channels skipped
    (``kinds``: each channel's address kind, ``Runtime.channel_kinds``)."""
    version = campaign.version
    if item.template is not None:
        parsed = template_version(item.template)
        if parsed is None or parsed[0] != campaign.template:
            raise InvalidInput(f"{where}payload.template",
                               f"must be {campaign.template!r} with a version, like "
                               f"'{campaign.template}-v{campaign.version}', for queue "
                               f"{queue!r} (campaign {campaign.name!r})")
        if parsed[1] != campaign.version:
            # Another version is another key: a second send to a customer and day
            # already sent. Moving a campaign to a new version is a change of its
            # settings (and an explicit replay), never a side effect of a publish.
            raise VersionConflict(f"{where}payload.template", (
                f"campaign {campaign.name!r} is declared at v{campaign.version}; this "
                f"publish names v{parsed[1]} ({item.template!r}). Publish "
                f"'{campaign.template}-v{campaign.version}' (or no template), or move the "
                f"campaign to v{parsed[1]} in its settings first"))
    day = item.schedule_day
    try:
        due_at = campaign.schedule.occurrence_for(day).logical_at
        occurrence: str | None = occurrence_id(campaign.name, day)
    except InvalidInput:
        # The campaign's cron does not fire that day: the day itself is the due time.
        due_at = datetime.combine(date.fromisoformat(day), time(0),
                                  tzinfo=campaign.schedule.zone).timestamp()
        occurrence = None
    expires_at = None if campaign.expires_after_s is None else due_at + campaign.expires_after_s
    if expires_at is not None and expires_at <= now:
        raise InvalidInput(f"{where}payload.schedule_day",
                           f"{day} is past the freshness deadline of campaign "
                           f"{campaign.name!r} ({campaign.expires_after_s:g} s after it is due)")
    if not recipient.active:
        return [], {ch: "recipient is not active" for ch in campaign.channels}
    data = extra_data(item, recipient, where=where)
    drafts, skipped = [], {}
    for channel in campaign.channels:
        kind = address_kind(channel, kinds.get(channel))
        address = recipient.address(kind)
        if not address:
            skipped[channel] = f"customer has no {'phone' if kind == 'sms' else 'email'}"
            continue
        drafts.append(IntentDraft(
            key=campaign_key(campaign.name, day, item.customer_id, channel, version),
            channel=channel, recipient_id=item.customer_id, address=address,
            template=template_ref(campaign.template, version), data=data, due_at=due_at,
            expires_at=expires_at, campaign=campaign.name, occurrence=occurrence))
    return drafts, skipped


def channel_drafts(channel: str, item: PublishItem, *, queue: str, kind: str,
                   where: str = "") -> list[IntentDraft]:
    """The one intent a publish to a channel queue stands for (the message names the
    address and the template; ``kind`` is the channel's address kind)."""
    name = "phone" if kind == "sms" else "email"
    address = item.phone if kind == "sms" else item.email
    if not address:
        raise InvalidInput(f"{where}payload.{name}",
                           f"is required for queue {queue!r} (channel {channel!r})")
    if item.template is None:
        raise InvalidInput(f"{where}payload.template",
                           f"is required for queue {queue!r} (channel {channel!r})")
    parsed = template_version(item.template)
    if parsed is None and "/" in item.template:
        raise InvalidInput(f"{where}payload.template",
                           "must end in a version (like 'receipt-v2') or contain no '/'")
    segment = item.template if parsed is None else f"v{parsed[1]}"
    template = item.template if parsed is None else template_ref(*parsed)
    day = item.schedule_day
    due_at = datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp()
    return [IntentDraft(
        key=queue_key(queue, day, item.customer_id, channel, segment), channel=channel,
        recipient_id=item.customer_id, address=address, template=template,
        data=extra_data(item, None, where=where), due_at=due_at)]


def sendable(problem: DraftProblem, drafts: Sequence[IntentDraft], skipped: dict[str, str],
             *, from_payload: bool, template_field: str, where: str = ""
             ) -> list[IntentDraft]:
    """The drafts a worker could send, checked as it will check them (``problem``:
    template, address, data): a template that does not exist (refused as
    ``template_field``), an address the message gave that no send can use, or a
    variable every message of the template needs that the data lacks (refused as
    ``payload.data.<variable>``), is refused now rather than a rejected intent later.
    An address from the audience that no send can use skips its channel (``skipped``
    says why)."""
    kept = []
    for draft in drafts:
        try:
            validate_key(draft.key)  # what a worker's message decode checks again
        except InvalidInput as exc:
            raise InvalidInput(f"{where}payload", f"makes a delivery key that {exc.message}; "
                               "shorten customer_id or template") from None
        found = problem(draft)
        if found is None:
            kept.append(draft)
            continue
        what, text = found
        if what == "template":
            raise InvalidInput(f"{where}{template_field}", f"{text} (channel {draft.channel!r})")
        if what.startswith("data."):
            # The message's fields, its data and the audience's columns make the data.
            raise InvalidInput(f"{where}payload.{what}", f"{text} (channel {draft.channel!r})")
        if from_payload:
            raise InvalidInput(
                f"{where}payload.{'phone' if draft.channel == 'sms' else 'email'}",
                f"{text} (channel {draft.channel!r})")
        skipped[draft.channel] = f"customer's address in the audience: {text}"
    return kept


# ---------------------------------------------------------------- the audience


def _predecessors(rid: str) -> list[str]:
    """Values just below ``rid`` to page an audience from: numerically (an INTEGER id
    column) and as a string (a text one)."""
    found = []
    # ASCII digits only: "²".isdigit() holds, and int("²") raises.
    if rid.isascii() and rid.isdigit() and int(rid) > 0:
        found.append(str(int(rid) - 1))
    below = ord(rid[-1]) - 1
    if 0xD800 <= below <= 0xDFFF:
        below = 0xD7FF  # the character before the surrogates, which no text can hold
    found.append(rid[:-1] + chr(below) + "\U0010ffff" if below > 0 else rid[:-1])
    return found


async def find_member(audience: Audience, rid: str) -> Recipient | None:
    """The audience member with id ``rid``, read through ``page`` (no lookup by id in
    the Audience port): a page that starts just below it, tried numerically and as a
    string. Bounded: at most two pages."""
    for after in _predecessors(rid):
        for member in await audience.page(after or None, _LOOKUP_PAGE):
            if member.id == rid:
                return member
    return None


# ---------------------------------------------------------------- one message


async def resolve(queue: str, item: PublishItem, *, queues: Mapping[str, QueueSettings],
                  campaign_of: Callable[[str], Campaign], kinds: Mapping[str, str],
                  problem: DraftProblem, now: float, where: str = "",
                  lanes: ChannelLanes = NO_LANES) -> Published:
    """The intents one message stands for, checked as a worker will check them.

    ``queues``: the configured queues; ``campaign_of``: the declared campaign of a
    name; ``kinds``: each channel's address kind; ``problem``: the send-time checks;
    ``lanes``: each channel's lane names (the publish route goes to ``transactional``
    unless the queue names its ``lane``).
    Reads a campaign's audience when the message gives no address; writes nothing."""
    published = await _resolve(queue, item, queues=queues, campaign_of=campaign_of,
                               kinds=kinds, problem=problem, now=now, where=where)
    target = queues[queue]
    drafts = [replace(d, lane=lane_number(lanes.get(d.channel, DEFAULT_LANES), target.lane,
                                          bulk=False),
                      group=lanes.group(d.channel, target.group))
              for d in published.drafts]
    return replace(published, drafts=drafts)


async def _resolve(queue: str, item: PublishItem, *, queues: Mapping[str, QueueSettings],
                   campaign_of: Callable[[str], Campaign], kinds: Mapping[str, str],
                   problem: DraftProblem, now: float, where: str) -> Published:
    target = queues.get(queue)
    if target is None:
        known = ", ".join(sorted(queues)) or "none (see [api.queues] in the settings)"
        raise InvalidInput(f"{where}queue", f"unknown queue {queue!r}; configured: {known}")
    if target.campaign is not None:
        campaign = campaign_of(target.campaign)
        from_payload = bool(item.email or item.phone)
        if from_payload:
            recipient = Recipient(id=item.customer_id, email=item.email, phone=item.phone)
        else:
            member = await find_member(campaign.audience, item.customer_id)
            if member is None:
                raise InvalidInput(f"{where}payload.customer_id",
                                   f"{item.customer_id!r} is not in the audience of "
                                   f"campaign {campaign.name!r}; send email or phone in the "
                                   "payload")
            recipient = member
        drafts, skipped = campaign_drafts(campaign, item, recipient, queue=queue, now=now,
                                          kinds=kinds, where=where)
        drafts = sendable(problem, drafts, skipped, from_payload=from_payload,
                          template_field="payload.template" if item.template else "queue",
                          where=where)
        return Published(queue=queue, campaign=campaign.name, channel=None, drafts=drafts,
                         skipped=skipped, channels=tuple(campaign.channels))
    assert target.channel is not None
    kind = address_kind(target.channel, kinds.get(target.channel))
    drafts = sendable(problem, channel_drafts(target.channel, item, queue=queue, kind=kind,
                                              where=where),
                      {}, from_payload=True, template_field="payload.template", where=where)
    return Published(queue=queue, campaign=None, channel=target.channel, drafts=drafts,
                     skipped={}, channels=(target.channel,))
