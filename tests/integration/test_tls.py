"""TLS (``rediss://``): the lock, its hand-over by pub/sub and the asyncio transports work over
a TLS connection, as redis-py's own commands do. The server is a private one with a TLS port
beside its plain one (the plain port is only the fixture's readiness probe), its certificate
signed by a throwaway CA made for the run; the clients trust that CA and nothing else."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import redlease
from redlease.testing import RedisServer, find_servers, free_port

pytest.importorskip("cryptography.x509")
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

WAIT = 30.0  # generous bound of every wait


def _builder(subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> Any:
    """What both certificates share: names, key, serial, one day of validity, and the subject
    key identifier a strict verifier wants."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )


def _write_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) files, with
    the extensions a strict verifier wants (Python 3.13's default context is X.509-strict)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "redlease test CA")])
    ca = (
        _builder("redlease test CA", ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder("127.0.0.1", ca_name, key)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


class TlsServer:
    def __init__(self, server: RedisServer, tls_port: int, ca: Path) -> None:
        self.server = server
        self.url = f"rediss://127.0.0.1:{tls_port}/0"
        self.ca = str(ca)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """A private server with a TLS port, from the first binary built with TLS (else skip)."""
    folder = tmp_path_factory.mktemp("tls")
    ca, cert, key = _write_certificates(folder)
    for binary in find_servers():
        tls_port = free_port()
        server = RedisServer(
            binary,
            extra_args=(
                "--tls-port", str(tls_port),
                "--tls-cert-file", str(cert),
                "--tls-key-file", str(key),
                "--tls-ca-cert-file", str(ca),
                "--tls-auth-clients", "no",
            ),
        )  # fmt: skip
        try:
            server.start()
        except RuntimeError:
            continue  # built without TLS: it refuses the options
        probe = redis.Redis.from_url(f"rediss://127.0.0.1:{tls_port}/0", ssl_ca_certs=str(ca))
        try:
            probe.ping()  # a server that started with a TLS port must answer on it
        except BaseException:
            server.stop()
            raise
        finally:
            probe.close()
        try:
            yield TlsServer(server, tls_port, ca)
        finally:
            server.stop()
        return
    pytest.skip("no server binary here is built with TLS")


def test_a_plain_connection_to_the_tls_port_is_refused(tls_server: TlsServer) -> None:
    """The port the clients below use speaks TLS only (they do not fall back to plain text)."""
    plain = redis.Redis.from_url(tls_server.url.replace("rediss://", "redis://"))
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            plain.ping()
    finally:
        plain.close()


def test_sync_lock_and_hand_over_over_tls(tls_server: TlsServer) -> None:
    with (
        redlease.Client.from_url(tls_server.url, ssl_ca_certs=tls_server.ca) as first,
        redlease.Client.from_url(tls_server.url, ssl_ca_certs=tls_server.ca) as second,
    ):
        lock = first.lock("tls:sync")
        assert lock.acquire()
        token = lock.fencing_token
        handed: list[int | None] = []

        def wait_for_it() -> None:
            other = second.lock("tls:sync")
            assert other.acquire(timeout=WAIT)
            handed.append(other.fencing_token)
            other.release()

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        # released once the waiter is in line: the lock is handed over by pub/sub, over TLS
        checker = redis.Redis.from_url(tls_server.url, ssl_ca_certs=tls_server.ca)
        try:
            in_line = threading.Event()
            for _ in range(int(WAIT / 0.01)):
                if checker.exists("redlease:line:{tls:sync}"):
                    in_line.set()
                    break
                in_line.wait(0.01)
            assert in_line.is_set()
            lock.release()
            waiter.join(WAIT)
        finally:
            checker.close()
        assert token is not None and handed and handed[0] is not None and handed[0] > token
        assert not lock.locked()


@pytest.mark.parametrize("pipeline", [False, True], ids=["direct", "pipeline"])
async def test_asyncio_lock_and_hand_over_over_tls(tls_server: TlsServer, pipeline: bool) -> None:
    async with (
        redlease.AsyncClient.from_url(
            tls_server.url, ssl_ca_certs=tls_server.ca, pipeline=pipeline
        ) as first,
        redlease.AsyncClient.from_url(
            tls_server.url, ssl_ca_certs=tls_server.ca, pipeline=pipeline
        ) as second,
    ):
        name = f"tls:async:{pipeline}"
        lock = first.lock(name)
        assert await lock.acquire()

        async def wait_for_it() -> int | None:
            other = second.lock(name)
            assert await other.acquire(timeout=WAIT)
            token = other.fencing_token
            await other.release()
            return token

        waiter = asyncio.create_task(wait_for_it())
        for _ in range(int(WAIT / 0.01)):
            if await first.redis.exists(f"redlease:line:{{{name}}}"):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the waiter never took its place in line")
        token = lock.fencing_token
        await lock.release()
        handed = await asyncio.wait_for(waiter, WAIT)
        assert token is not None and handed is not None and handed > token
        assert not await lock.locked()
