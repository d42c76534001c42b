"""``manage.py tidings_worker --channel email``: ``tidings worker`` on ``settings.TIDINGS``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tidings.core.errors import TidingsError


class Command(BaseCommand):
    help = ("Deliver one channel's messages until SIGTERM (work in hand is finished or "
            "released), as `tidings worker`, on the settings of settings.TIDINGS.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--channel", required=True, help="The channel to serve.")
        parser.add_argument("--processes", type=int, default=1,
                            help="Worker processes to run (supervised; default 1).")
        parser.add_argument("--no-reconcile", action="store_true",
                            help="Do not run the reconciler beside the worker.")

    def handle(self, *args: Any, **options: Any) -> None:
        from tidings.contrib.django.conf import tidings_settings
        from tidings.processes.commands import run_worker

        if options["processes"] < 1:
            raise CommandError("--processes must be at least 1")
        try:
            code = run_worker(tidings_settings(), options["channel"],
                              reconcile=not options["no_reconcile"],
                              processes=options["processes"])
        except TidingsError as exc:
            raise CommandError(str(exc)) from None
        if code:
            raise CommandError(f"a worker process failed while stopping (exit {code})",
                               returncode=code)
