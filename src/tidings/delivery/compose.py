"""The send-time gate: turn claimed intents into ready sends, or into reasons not to send.

The worker calls ``Composer.compose`` with a batch of freshly claimed intents, just
before pacing and sending. For each intent, in this order:

0. its address is on the suppression list      -> ``Suppressed`` (reason: the list's,
                                                  ``hard_bounce``, ``sms_stop``, …)
1. the recipient opted out of the channel      -> ``Cancelled`` (reason ``opted_out``)
2. the address cannot be used on the channel   -> ``Rejected`` (the check's reason)
3. the message cannot be rendered              -> ``Rejected`` (the RenderError's reason)
4. the recipient's quiet hours are on          -> ``Deferred`` until they end
5. otherwise                                   -> ``Ready`` with its ``SendRequest``

A rendered email whose intent takes one-click unsubscribe links
(``tidings.delivery.unsubscribe``) carries their two headers in ``Content.headers``.

Rendering comes before quiet hours so that a broken template or bad data is reported
when the campaign runs, not hours later when the quiet hours end. Content is
rendered here, at send time, from the intent's template id, data and recipient id;
it is never stored or queued. Preferences for the whole batch come from one store
read, and its addresses' suppressions (normalised, per channel kind:
``tidings.core.suppression``) from another.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from tidings.core.addresses import CHANNEL_KINDS, check_address, normalize_address
from tidings.core.clock import Clock
from tidings.core.errors import ConfigurationError
from tidings.core.model import Content, Intent, IntentDraft, SendData, SendRequest, address_kind
from tidings.core.preferences import Preference, verdict
from tidings.core.states import State
from tidings.stores.base import PreferenceRecords, Suppressions

if TYPE_CHECKING:
    # Imported where a channel has templates (then it is loaded already): jinja2 is
    # no import of a worker whose channel renders nothing.
    from tidings.delivery.templates import TemplateSet
    from tidings.delivery.unsubscribe import UnsubscribeLinks


class GateStore(PreferenceRecords, Suppressions, Protocol):
    """What the gate reads: recipients' preferences and the suppression list."""


@dataclass(frozen=True, kw_only=True)
class Ready:
    """Send ``request`` (its ``content`` is None on a channel without templates)."""

    key: str
    request: SendRequest


@dataclass(frozen=True, kw_only=True)
class Rejected:
    """Never sendable as it stands (bad address, template or data): terminal."""

    to_state: ClassVar[State] = State.REJECTED
    event: ClassVar[str] = "rejected"
    key: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Cancelled:
    """The recipient does not want this channel: terminal, not a failure."""

    to_state: ClassVar[State] = State.CANCELLED
    event: ClassVar[str] = "cancelled"
    key: str
    reason: str = "opted_out"


@dataclass(frozen=True, kw_only=True)
class Deferred:
    """Not now: try again at ``until`` (epoch seconds). Not a failure."""

    to_state: ClassVar[State] = State.RETRYABLE
    event: ClassVar[str] = "deferred"
    key: str
    until: float
    reason: str = "quiet hours"


@dataclass(frozen=True, kw_only=True)
class Suppressed:
    """The address is on the suppression list: terminal, no provider call, and not a
    failure. ``reason`` is the list's (``hard_bounce``, ``complaint``, ``sms_stop``, …)."""

    to_state: ClassVar[State] = State.SUPPRESSED
    event: ClassVar[str] = "suppressed"
    key: str
    reason: str


Composed = Ready | Rejected | Cancelled | Deferred | Suppressed


class Composer:
    """Decides, for a batch of claimed intents, what to send and what to settle unsent.

    ``kinds`` maps a channel name to its kind (``email`` or ``sms``); a channel
    without a kind gets neither an address check nor rendering (its provider works
    from the identifiers alone, like the sandbox). ``templates`` maps a channel name
    to its TemplateSet; a channel without one sends ``content=None``. Preferences
    apply to every channel. ``test_domains`` accepts ``*.test`` and single-label
    email domains (test set-ups only). ``unsubscribe`` signs the one-click unsubscribe
    headers of rendered email (None: no headers).
    """

    def __init__(self, *, store: GateStore, kinds: Mapping[str, str],
                 templates: Mapping[str, TemplateSet] | None = None, clock: Clock,
                 test_domains: bool = False,
                 unsubscribe: UnsubscribeLinks | None = None) -> None:
        for channel, kind in kinds.items():
            if kind not in CHANNEL_KINDS:
                raise ConfigurationError(f"channels.{channel}.kind",
                                         f"{kind!r} is not one of "
                                         f"{', '.join(sorted(CHANNEL_KINDS))}")
        templates = dict(templates or {})
        for channel in templates:
            if channel not in kinds:
                raise ConfigurationError(f"channels.{channel}.kind",
                                         "a channel with templates needs a kind (email or sms)")
        self.store = store
        self.kinds = dict(kinds)
        self.templates = templates
        self.clock = clock
        self.test_domains = test_domains
        self.unsubscribe = unsubscribe

    async def compose(self, intents: Sequence[Intent], *,
                      now: float | None = None) -> list[Composed]:
        """One result per intent, in order; the batch's suppressions are read in one
        batch, and its preferences in another."""
        if not intents:
            return []
        at = self.clock.now() if now is None else now
        listed = [self.suppression_pair(i.channel, i.address) for i in intents]
        suppressions = await self.store.suppressions_for(list(dict.fromkeys(listed)))
        pairs = list(dict.fromkeys((i.recipient_id, i.channel) for i in intents))
        preferences = await self.store.preferences_for(pairs)
        return [Suppressed(key=i.key, reason=found.reason.value)
                if (found := suppressions.get(pair)) is not None
                else self.compose_one(i, preferences.get((i.recipient_id, i.channel)), now=at)
                for i, pair in zip(intents, listed, strict=True)]

    def suppression_pair(self, channel: str, address: str) -> tuple[str, str]:
        """The (normalised address, kind) a send of ``channel`` to ``address`` is on the
        suppression list under."""
        kind = self.address_kind_of(channel)
        return normalize_address(kind, address), kind

    def address_kind_of(self, channel: str) -> str:
        """Which addresses ``channel`` sends to (``model.address_kind``): its kind; a
        channel without one is addressed by email unless named ``sms``."""
        return address_kind(channel, self.kinds.get(channel))

    def address_problem(self, channel: str, address: str) -> str | None:
        """Why ``address`` can never be sent to on ``channel`` (the send-time check, which
        the API also runs when it takes a message), or None."""
        kind = self.kinds.get(channel)
        if kind is None:
            return None
        return check_address(kind, address, test_domains=self.test_domains)

    def template_problem(self, channel: str, template: str) -> str | None:
        """Why ``template`` cannot be rendered on ``channel`` whatever its data (no such
        id or version among the channel's templates), or None."""
        templates = self.templates.get(channel)
        if templates is None or channel not in self.kinds:
            return None
        return templates.missing(template, self.kinds[channel])

    def draft_problem(self, draft: IntentDraft) -> tuple[str, str] | None:
        """Why no send of ``draft`` could ever go (its template, its address, then its
        data, as the send-time checks say), as ``(what, problem)``: ``what`` is
        ``"template"``, ``"address"`` or ``"data.<variable>"`` (a variable every render
        of the template reads, missing from the data); None when nothing is. What
        ``notify`` and the publish route refuse at once rather than reject per intent
        later."""
        missing = self.template_problem(draft.channel, draft.template)
        if missing is not None:
            return "template", missing
        problem = self.address_problem(draft.channel, draft.address)
        if problem is not None:
            return "address", problem
        return self.data_problem(draft.channel, draft.template, draft.data)

    def data_problem(self, channel: str, template: str, data: str
                     ) -> tuple[str, str] | None:
        """A variable every render of ``template`` on ``channel`` reads that ``data``
        (the intent's JSON text) lacks, as ``("data.<variable>", problem)``, or None
        (``TemplateSet.unprovided``: guarded and defaulted uses do not count)."""
        templates = self.templates.get(channel)
        kind = self.kinds.get(channel)
        if templates is None or kind is None:
            return None
        try:
            values = json.loads(data or "{}")
        except ValueError:
            return None  # no draft holds such data: encode_data wrote it
        names = values if isinstance(values, dict) else {}
        found = templates.unprovided(template, kind, names)
        if found is None:
            return None
        variable, file = found
        return f"data.{variable}", (
            f"is missing: template {template!r} {file} uses it in every message (give it "
            "in data, or, if it is optional, guard it in the template with `is defined` "
            "or `| default(...)`)")

    def compose_one(self, intent: Intent, preference: Preference | None, *,
                    now: float) -> Composed:
        """The decision for one intent given its preference (no I/O)."""
        said = verdict(preference, now)
        if said.action == "opted_out":
            return Cancelled(key=intent.key)
        kind = self.kinds.get(intent.channel)
        problem = self.address_problem(intent.channel, intent.address)
        if problem is not None:
            return Rejected(key=intent.key, reason=problem)
        content: Content | None = None
        data = SendData(text=intent.data)  # parsed only if the provider looks
        templates = self.templates.get(intent.channel)
        if templates is not None and kind is not None:
            from tidings.delivery.templates import RenderError

            try:
                parsed = _data(intent)
                content = templates.render(intent.template, kind, parsed,
                                           intent.recipient_id)
            except RenderError as exc:
                return Rejected(key=intent.key, reason=exc.reason)
            data = SendData(parsed, text=intent.data)  # the one parse, shared
            if self.unsubscribe is not None and kind == "email":
                headers = self.unsubscribe.headers_for(intent)
                if headers:
                    content = replace(content, headers=headers)
        if said.action == "defer" and said.until is not None:
            return Deferred(key=intent.key, until=said.until)
        return Ready(key=intent.key, request=SendRequest(
            key=intent.key, channel=intent.channel, to=intent.address,
            template=intent.template, data=data, recipient_id=intent.recipient_id,
            content=content))


def _data(intent: Intent) -> dict[str, Any]:
    """The intent's template data; RenderError (naming the template) if not an object."""
    from tidings.delivery.templates import RenderError

    try:
        data = json.loads(intent.data or "{}")
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise RenderError(f"template {intent.template!r}: data is not a JSON object",
                          kind="bad_data")
    return data
