"""``python manage.py redlease status|list|release``: the ``redlease`` command line's own
``status``, ``list`` and ``release --force``, on the client of ``settings.REDLEASE`` (its URL
or its cache's connection), with lock names as the app gives them (``KEY_PREFIX`` added)."""

from __future__ import annotations

import contextlib
import io
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from redlease import cli

from ... import _clients

ERROR = "redlease: error: "


class _Stdout(io.TextIOBase):
    """The command line's stdout, written as is to the command's (``call_command(stdout=)``)."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(text, ending="")
        return len(text)

    def flush(self) -> None:
        self.out.flush()


class _Stderr(io.TextIOBase):
    """The command line's stderr: its notes and questions go on to ``out``; its error lines
    are kept, to become the ``CommandError`` Django reports."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.failures: list[str] = []
        self._in_error = False

    def write(self, text: str) -> int:
        if self._in_error or text.startswith(ERROR):
            self._in_error = not text.endswith("\n")
            line = text.removeprefix(ERROR).strip()
            if line:
                self.failures.append(line)
        else:
            self.out.write(text, ending="")
            self.out.flush()
        return len(text)


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Locks seen from outside, on the server of settings.REDLEASE: status NAME...,"
        " list [PATTERN], release --force NAME (the redlease command line's own commands)."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        status = actions.add_parser(
            "status",
            help="whether locks are held, by whom, for how long",
            description="For each NAME: held or free, the holders, the lease left.",
        )
        status.add_argument("names", nargs="+", metavar="NAME", help="a lock name")
        status.add_argument("--json", action="store_true", help="print JSON")
        listing = actions.add_parser(
            "list",
            help="the locks held now (SCAN, never KEYS)",
            description="The held locks whose names match PATTERN (found with SCAN).",
        )
        listing.add_argument("pattern", nargs="?", default="*", metavar="PATTERN")
        listing.add_argument("--limit", type=int, default=1000, metavar="N")
        listing.add_argument("--json", action="store_true", help="print JSON")
        release = actions.add_parser(
            "release",
            help="force-release a lock whoever holds it (wakes its waiters)",
            description="Delete the lock NAME whoever holds it and wake its waiters. A redlease"
            " holder whose lease its watchdog renews is told at once (its on_lease_lost runs);"
            " another holder learns only when its watchdog or its release finds the lock gone,"
            " so it may still be running. Asks for confirmation unless --yes.",
        )
        release.add_argument("name", metavar="NAME")
        release.add_argument(
            "--force",
            action="store_true",
            required=True,
            help="required: the only release possible from outside is a forced one",
        )
        release.add_argument(
            "--yes",
            "--no-input",
            "--noinput",
            dest="yes",
            action="store_true",
            help="do not ask for confirmation (needed when stdin is not a terminal)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            prefix = _clients.config().key_prefix
            client = _clients.get_client()
        except ImproperlyConfigured as exc:  # one line, as every other error here
            raise CommandError(str(exc)) from None
        action = options["action"]
        argv: list[str] = [action]
        if action == "status":
            argv += ["--json"] if options["json"] else []
            argv += ["--", *(prefix + name for name in options["names"])]
        elif action == "list":
            argv += ["--limit", str(options["limit"])]
            argv += ["--json"] if options["json"] else []
            argv += ["--", prefix + options["pattern"]]
        else:
            argv += ["--force", *(["--yes"] if options["yes"] else [])]
            argv += ["--", prefix + options["name"]]
        stderr = _Stderr(self.stderr)
        with contextlib.redirect_stdout(_Stdout(self.stdout)), contextlib.redirect_stderr(stderr):
            code = cli.main(argv, client=client)
        if code:
            message = "; ".join(stderr.failures) or f"{action}: exit status {code}"
            raise CommandError(message, returncode=code)
