"""``manage.py tidings_scheduler``: ``tidings scheduler`` on ``settings.TIDINGS``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tidings.core.errors import TidingsError


class Command(BaseCommand):
    help = ("Admit due campaign occurrences and publish due intents, pass after pass, as "
            "`tidings scheduler`, on the settings of settings.TIDINGS.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="Run one bounded pass and exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        from tidings.contrib.django.conf import tidings_settings
        from tidings.processes.commands import run_scheduler

        try:
            run_scheduler(tidings_settings(), once=options["once"])
        except TidingsError as exc:
            raise CommandError(str(exc)) from None
