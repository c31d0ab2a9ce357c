"""``redlease demo``: the lost-update race without a lock, then with one."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .common import CommandError, address_of, int_range, redis_url, warn

if TYPE_CHECKING:
    from .common import Commands


def _cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo on ``--url``, or on a private server started (and stopped) for it."""
    from ..demo import DemoError, run_demo

    try:
        if args.url is not None:
            address = address_of(args.url)
            return run_demo(
                args.url,
                address,
                "given by --url",
                workers=args.workers,
                stock=args.stock,
                out=sys.stdout,
                warn=lambda text: warn(text, args.url),
            )
        from ..testing import RedisServer

        with RedisServer() as server:
            return run_demo(
                server.url,
                f"{server.host}:{server.port}",
                "private, stopped at the end",
                workers=args.workers,
                stock=args.stock,
                out=sys.stdout,
                warn=lambda text: warn(text, None),
            )
    except DemoError as exc:
        raise CommandError(str(exc)) from None


def add_demo(commands: Commands) -> None:
    parser = commands.add_parser(
        "demo",
        help="show lost updates without a lock and exact results with one",
        description=(
            "Worker processes sell items from one Redis stock key with GET/SET, first without"
            " a lock (they oversell), then with a redlease lock around each sale (exact)."
            " Without --url a private server is started and stopped."
        ),
    )
    parser.add_argument(
        "--url",
        type=redis_url,
        metavar="URL",
        help="use this server (keys under redlease:demo:, deleted afterwards)"
        " instead of a private one",
    )
    parser.add_argument(
        "--workers",
        type=int_range(1, 64),
        default=4,
        metavar="N",
        help="worker processes (1-64, default 4)",
    )
    parser.add_argument(
        "--stock",
        type=int_range(1, 1_000_000),
        default=100,
        metavar="N",
        help="items in stock (1-1000000, default 100)",
    )
    parser.set_defaults(handler=_cmd_demo)
