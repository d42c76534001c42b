"""What an application notified, for its own tests: read from the store, asserted on.

An application's test runs its view, task or service and then asks what it notified,
with no worker::

    from tidings.testing import assert_notified

    response = client.post("/orders", json=order)
    assert_notified(tidings_client, key="order-4821", channel="email",
                    recipient="73", template="order-confirmed", data={"order": 4821})

The notifications are the intents in the store (``notifications(client)``, ``await
anotifications(runtime)``), so every door counts alike (the sync client, the runtime,
``tidings.contrib.django``, ``tidings.contrib.sqlalchemy``): a notify in a transaction
that rolled back is not there, one that committed is, once, whatever the retries. A
filter matches a field exactly; ``key`` matches the key given to ``notify``
(``order-4821``) or an intent's own (``order-4821:email``), ``data`` every item it
names (the intent's other data is not compared).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidings.core.keys import notify_key
from tidings.core.states import State
from tidings.stores.records import Selection

if TYPE_CHECKING:
    from tidings.client import Client
    from tidings.core.model import Intent
    from tidings.runtime import Runtime

_PAGE = 1000


@dataclass(frozen=True, kw_only=True)
class Notification:
    """One intent, as a test reads it."""

    key: str
    channel: str
    recipient: str
    """The recipient's id."""
    address: str
    template: str
    data: Mapping[str, Any]
    state: State
    due_at: float
    campaign: str | None

    @classmethod
    def of(cls, intent: Intent) -> Notification:
        return cls(key=intent.key, channel=intent.channel, recipient=intent.recipient_id,
                   address=intent.address, template=intent.template,
                   data=json.loads(intent.data) if intent.data else {}, state=intent.state,
                   due_at=intent.due_at, campaign=intent.campaign)

    def matches(self, *, key: str | None = None, channel: str | None = None,
                recipient: str | None = None, address: str | None = None,
                template: str | None = None, data: Mapping[str, Any] | None = None,
                state: State | str | None = None, campaign: str | None = None) -> bool:
        """Whether every filter given holds (see the module)."""
        if key is not None and self.key not in (key, _notify_key_of(self, key)):
            return False
        for wanted, have in ((channel, self.channel), (recipient, self.recipient),
                             (address, self.address), (template, self.template),
                             (campaign, self.campaign)):
            if wanted is not None and wanted != have:
                return False
        if state is not None and State(state) is not self.state:
            return False
        return data is None or all(
            name in self.data and self.data[name] == value for name, value in data.items())


def _notify_key_of(notification: Notification, key: str) -> str:
    # The intent key notify(key=...) makes on this notification's channel.
    return notify_key(key, notification.channel) if notification.campaign is None else ""


class Notifications(tuple[Notification, ...]):
    """The notifications at one moment, in key order; filter and assert on them."""

    def filter(self, **match: Any) -> Notifications:
        """Those that match every filter (``Notification.matches``)."""
        return Notifications(n for n in self if n.matches(**match))

    def assert_notified(self, *, count: int | None = None, **match: Any) -> Notifications:
        """The notifications that match; AssertionError, listing what there is, when none
        does (or not ``count`` of them)."""
        found = self.filter(**match)
        if (count is None and not found) or (count is not None and len(found) != count):
            wanted = "a notification" if count is None else f"{count} notification(s)"
            raise AssertionError(f"expected {wanted} matching {_shown(match)}, found "
                                 f"{len(found)}; notified: {self._listed()}")
        return found

    def assert_not_notified(self, **match: Any) -> None:
        """AssertionError, naming them, when any notification matches."""
        found = self.filter(**match)
        if found:
            raise AssertionError(f"expected no notification matching {_shown(match)}, "
                                 f"found {len(found)}: {found._listed()}")

    def _listed(self) -> str:
        if not self:
            return "nothing"
        return "; ".join(f"{n.key} ({n.template} to {n.recipient}, {n.state.value})"
                         for n in self)


def _shown(match: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in match.items()) or "anything"


async def anotifications(runtime: Runtime) -> Notifications:
    """Every intent in ``runtime``'s store, as notifications."""
    found: list[Notification] = []
    after: str | None = None
    every = Selection(states=tuple(State))
    while True:
        page = await runtime.store.intent_select(every, after=after, limit=_PAGE)
        found += [Notification.of(intent) for intent in page]
        if len(page) < _PAGE:
            return Notifications(found)
        after = page[-1].key


def notifications(client: Client) -> Notifications:
    """``anotifications`` of a ``Client``'s runtime."""
    return client._call(anotifications)


def assert_notified(source: Client | Notifications, *, count: int | None = None,
                    **match: Any) -> Notifications:
    """``Notifications.assert_notified`` on what ``source`` notified (a ``Client``, or
    notifications read already: ``assert_notified(await anotifications(runtime), ...)``)."""
    return _of(source).assert_notified(count=count, **match)


def assert_not_notified(source: Client | Notifications, **match: Any) -> None:
    """``Notifications.assert_not_notified`` on what ``source`` notified."""
    _of(source).assert_not_notified(**match)


def _of(source: Client | Notifications) -> Notifications:
    return source if isinstance(source, Notifications) else notifications(source)
