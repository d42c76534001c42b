"""``manage.py tidings_reconcile``: ``tidings reconcile`` on ``settings.TIDINGS``."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tidings.core.errors import TidingsError


class Command(BaseCommand):
    help = ("One reconciler sweep (expired leases, stuck publishes, lost messages, uncertain "
            "sends), as `tidings reconcile`, on the settings of settings.TIDINGS.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        from tidings.contrib.django.conf import tidings_settings
        from tidings.processes.commands import reconcile_once

        try:
            result = reconcile_once(tidings_settings())
        except TidingsError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(result, default=str))
            return
        for name, value in result.items():
            self.stdout.write(f"{name.replace('_', ' ')}: {value}")
