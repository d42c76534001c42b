"""The admin's read-only view of tidings' intents and their timelines.

Listed by key, channel, campaign, state and last change, filtered by channel, state and
campaign, searched by key; each intent shows its timeline (its events in order). Nothing
can be added, changed or deleted here: an operator's action is audited by tidings
(``tidings`` CLI, the API, the dashboard), never a row edited behind its back.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tidings.contrib.django.models import Event, Intent
from tidings.core.surrogate import surrogate

if TYPE_CHECKING:
    _Base = admin.ModelAdmin[Intent]
else:  # Django's ModelAdmin is generic in its stubs only
    _Base = admin.ModelAdmin


def _when(at: float | None) -> str:
    if at is None:
        return "–"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@admin.register(Intent)
class IntentAdmin(_Base):
    list_display = ("key", "channel", "campaign", "state", "updated")
    list_filter = ("channel", "state", "campaign")
    search_fields = ("key",)
    fields = ("key", "channel", "campaign", "recipient", "template", "state", "due",
              "enqueued", "accepted", "finished", "attempts", "receipt", "disposition",
              "reason", "timeline")
    readonly_fields = fields

    @admin.display(description="recipient")
    def recipient(self, intent: Intent) -> str:
        return surrogate(intent.recipient_id)  # as the logs and the dashboard name it

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, intent: Intent) -> str:
        return _when(intent.updated_at)

    @admin.display(description="due")
    def due(self, intent: Intent) -> str:
        return _when(intent.due_at)

    @admin.display(description="enqueued")
    def enqueued(self, intent: Intent) -> str:
        return _when(intent.enqueued_at)

    @admin.display(description="accepted")
    def accepted(self, intent: Intent) -> str:
        return _when(intent.accepted_at)

    @admin.display(description="finished")
    def finished(self, intent: Intent) -> str:
        return _when(intent.finished_at)

    @admin.display(description="timeline")
    def timeline(self, intent: Intent) -> SafeString:
        events = Event.objects.filter(key=intent.key).order_by("at", "id")
        rows = format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((_when(e.at), e.type, e.state or "", e.worker or "", e.detail or "")
             for e in events))
        return format_html("<table><tr><th>at</th><th>event</th><th>state</th>"
                           "<th>worker</th><th>detail</th></tr>{}</table>", rows)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
