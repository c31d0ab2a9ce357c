"""The CLI with a Sentinel URL that cannot work: one line, the right exit status, and never
the password (nor the sentinels' password)."""

from __future__ import annotations

import pytest

from redlease.testing import free_port

from .helpers import assert_one_line, cli_env, run_cli

SECRET = "s3cret-w0rd"


def _url(hosts: str, path: str = "/mymaster/0") -> str:
    return f"redis+sentinel://app:{SECRET}@{hosts}{path}?sentinel_password=other-{SECRET}"


@pytest.mark.parametrize("command", [["status", "some-lock"], ["run", "some-lock", "--", "true"]])
def test_unreachable_sentinels(command: list[str]) -> None:
    ports = [free_port(), free_port()]  # nothing listens there
    url = _url(",".join(f"127.0.0.1:{p}" for p in ports))
    result = run_cli(*command[:1], "--url", url, *command[1:])
    assert result.returncode == 1, result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert f"sentinel mymaster at 127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}" in result.stderr
    assert_one_line(result.stderr)


@pytest.mark.parametrize(
    ("path", "what"),
    [("", "no service (master) name"), ("/mymaster/x", "bad database number 'x'")],
)
def test_a_bad_sentinel_url_is_a_usage_error(path: str, what: str) -> None:
    url = _url("127.0.0.1:26379", path)
    for result in (
        run_cli("status", "--url", url, "some-lock"),
        run_cli("status", "some-lock", env=cli_env(REDLEASE_URL=url)),
    ):
        assert result.returncode == 2
        assert what in result.stderr
        assert SECRET not in result.stdout + result.stderr
        assert_one_line(result.stderr)
