"""``TcpProxy``: a loopback proxy between clients and a server, to freeze, cut or drop one
reply on purpose (fault injection)."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from dataclasses import dataclass, field
from types import TracebackType

from .servers import Address, _address, free_port


@dataclass(eq=False)
class _Link:
    """One proxied connection: the client's socket, ours to the server, and what is in flight."""

    client: socket.socket
    upstream: socket.socket
    to_upstream: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    tail: bytes = b""
    """The last bytes the client sent, so that a match split across two reads is found."""
    client_eof: bool = False
    upstream_eof: bool = False
    drop: threading.Event | None = None
    """Set when a command on this link was forwarded whose reply is to be swallowed."""
    closed: bool = False

    def sockets(self) -> tuple[socket.socket, socket.socket]:
        return self.client, self.upstream


@dataclass(eq=False)
class _Request:
    """Something the forwarding thread is asked to do between two rounds (``cut``, or just
    acknowledge that it saw a state change)."""

    kind: str
    done: threading.Event = field(default_factory=threading.Event)
    result: int = 0


_MATCH_TAIL = 4096
"""Bytes of client data kept to find a ``drop_next_reply`` pattern split across two reads (a
pattern must be shorter)."""


class TcpProxy:
    """A TCP proxy on 127.0.0.1 between clients and a server, for breaking the network on
    purpose. One thread forwards every connection; nothing is changed on the way unless asked:

    ``freeze()``
        Stop forwarding in both directions but keep every socket open, like a network that
        silently stops delivering (new connections are accepted and frozen too). ``thaw()``
        delivers what was held back, late, as TCP would once the network heals.
    ``cut()``
        Close every proxied connection at once (both sides see the connection drop).
    ``drop_next_reply(match)``
        Forward the next client command whose bytes contain ``match`` (any command when
        ``None``) to the server, swallow the server's reply and close that connection: the
        server ran the command, the client never hears so, and redis-py retries it on a new
        connection.
    ``retarget(server)``
        Send new connections to another server (existing ones keep theirs), as a virtual IP
        moved to a promoted replica would.

    ``with TcpProxy(server) as proxy: Client.from_url(proxy.url)``. The forwarding thread stops
    on ``close()``; everything the proxy opened is closed with it.
    """

    def __init__(
        self,
        target: Address,
        *,
        port: int | None = None,
        connect_timeout: float = 2.0,
        max_buffer: int = 4 << 20,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.connect_timeout = connect_timeout
        self.max_buffer = max_buffer
        self._target = _address(target)
        self._mutex = threading.Lock()
        self._frozen = False
        self._pending_drops: list[tuple[bytes | None, threading.Event]] = []
        self._freeze_after: set[threading.Event] = set()  # drops that freeze the proxy
        self._requests: list[_Request] = []
        self._links: list[_Link] = []
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.accepted = 0
        """Connections accepted since ``start()``."""
        self.dropped = 0
        """Replies swallowed by ``drop_next_reply``."""

    # --- public -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def target(self) -> tuple[str, int]:
        """``(host, port)`` that new connections are forwarded to."""
        with self._mutex:
            return self._target

    @property
    def frozen(self) -> bool:
        with self._mutex:
            return self._frozen

    @property
    def connections(self) -> int:
        """Proxied connections open now."""
        with self._mutex:
            return len(self._links)

    def start(self) -> TcpProxy:
        if self._thread is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = False
        self._thread = threading.Thread(
            target=self._loop, name=f"redlease-proxy-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the forwarding thread and close every socket the proxy opened."""
        thread = self._thread
        if thread is None:
            return
        with self._mutex:
            self._stopping = True
        self._wake()
        thread.join(timeout=10)
        self._thread = None
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._listener = self._wake_r = self._wake_w = None
        with self._mutex:
            links, self._links = self._links, []
            drops, self._pending_drops = self._pending_drops, []
        for link in links:
            self._close_sockets(link)
        for _, event in drops:
            event.set()

    def freeze(self) -> None:
        """Stop forwarding both ways (sockets stay open); returns once nothing moves."""
        with self._mutex:
            self._frozen = True
        self._barrier("freeze")

    def thaw(self) -> None:
        """Forward again, starting with what was held back while frozen."""
        with self._mutex:
            self._frozen = False
        self._barrier("thaw")

    def cut(self) -> int:
        """Close every proxied connection now; returns how many there were. New connections
        are accepted as before (``freeze()`` as well to keep the client out)."""
        return self._barrier("cut")

    def retarget(self, target: Address) -> None:
        """Forward new connections to ``target`` (``cut()`` to move the existing ones too)."""
        with self._mutex:
            self._target = _address(target)

    def drop_next_reply(
        self, match: bytes | None = None, *, then_freeze: bool = False
    ) -> threading.Event:
        """Arrange for the reply to the next command containing ``match`` (any command when
        ``None``) to be swallowed after the server ran the command, and its connection closed.

        Returns an event that is set once the reply was swallowed, just before the connection
        is closed (or when the proxy closes). Several calls queue several drops, each used
        once, in order. With ``then_freeze``, the proxy freezes (as ``freeze()``) in the same
        instant, before the client sees its connection close: its resend on a new connection
        hangs, however soon it comes (a ``freeze()`` called once the event is set may be late).
        """
        event = threading.Event()
        with self._mutex:
            self._pending_drops.append((match, event))
            if then_freeze:
                self._freeze_after.add(event)
        self._wake()
        return event

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        host, port = self._target
        return f"<TcpProxy {self.host}:{self.port} -> {host}:{port}>"

    # --- the forwarding thread -----------------------------------------------------------

    def _wake(self) -> None:
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")

    def _barrier(self, kind: str) -> int:
        """Have the forwarding thread run request ``kind`` and wait until it has."""
        if self._thread is None or not self._thread.is_alive():
            return 0
        request = _Request(kind)
        with self._mutex:
            self._requests.append(request)
        self._wake()
        if not request.done.wait(timeout=10):
            raise RuntimeError(f"proxy thread did not answer {kind!r} in time")
        return request.result

    def _loop(self) -> None:
        assert self._listener is not None and self._wake_r is not None
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, None)
        selector.register(self._wake_r, selectors.EVENT_READ, None)
        interest: dict[socket.socket, int] = {}
        try:
            while True:
                with self._mutex:
                    if self._stopping:
                        return
                    requests, self._requests = self._requests, []
                for request in requests:
                    if request.kind == "cut":
                        request.result = self._close_all(selector, interest)
                    request.done.set()
                self._update_interest(selector, interest)
                for key, events in selector.select(timeout=0.5):
                    sock = key.fileobj
                    if sock is self._wake_r:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif sock is self._listener:
                        self._accept()
                    else:
                        link = key.data
                        assert isinstance(link, _Link)
                        if link.closed:
                            continue  # dropped earlier in this round
                        self._service(link, sock is link.client, events)
                        if self._finished(link):
                            self._drop_link(link, selector, interest)
        finally:
            selector.close()

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(64):  # bounded: the rest waits for the next round
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            with self._mutex:
                target = self._target
            try:
                upstream = socket.create_connection(target, timeout=self.connect_timeout)
            except OSError:
                client.close()  # the server is down: the client sees its connection close
                continue
            for sock in (client, upstream):
                sock.setblocking(False)
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mutex:
                self._links.append(_Link(client, upstream))
                self.accepted += 1

    def _update_interest(
        self, selector: selectors.BaseSelector, interest: dict[socket.socket, int]
    ) -> None:
        with self._mutex:
            frozen = self._frozen
            links = list(self._links)
        for link in links:
            for sock, eof, inbox, outbox in (
                (link.client, link.client_eof, link.to_upstream, link.to_client),
                (link.upstream, link.upstream_eof, link.to_client, link.to_upstream),
            ):
                mask = 0
                if not frozen:
                    if not eof and len(inbox) < self.max_buffer:
                        mask |= selectors.EVENT_READ
                    if outbox:
                        mask |= selectors.EVENT_WRITE
                old = interest.get(sock, 0)
                if mask == old:
                    continue
                if old == 0:
                    selector.register(sock, mask, link)
                elif mask == 0:
                    selector.unregister(sock)
                else:
                    selector.modify(sock, mask, link)
                if mask:
                    interest[sock] = mask
                else:
                    interest.pop(sock, None)

    def _service(self, link: _Link, from_client: bool, events: int) -> None:
        with self._mutex:
            if self._frozen:
                return
        try:
            if events & selectors.EVENT_READ:
                self._read(link, from_client)
            self._flush(link)
        except OSError:
            link.client_eof = link.upstream_eof = True
            link.to_upstream.clear()
            link.to_client.clear()

    def _read(self, link: _Link, from_client: bool) -> None:
        sock = link.client if from_client else link.upstream
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            if from_client:
                link.client_eof = True
            else:
                link.upstream_eof = True
            return
        if from_client:
            if link.drop is None:
                self._match_drop(link, data)
            link.tail = (link.tail + data)[-_MATCH_TAIL:]
            link.to_upstream += data
        elif link.drop is not None:
            # the server answered a command whose reply is to be lost: swallow it, hang up
            link.client_eof = link.upstream_eof = True
            link.to_client.clear()
            link.to_upstream.clear()
        else:
            link.to_client += data

    def _match_drop(self, link: _Link, data: bytes) -> None:
        with self._mutex:
            for i, (match, event) in enumerate(self._pending_drops):
                # what this read brought, plus just enough of the previous read to find a
                # match that straddles the two (not an earlier command's bytes)
                if match is None or match in link.tail[len(link.tail) - len(match) + 1 :] + data:
                    link.drop = event
                    del self._pending_drops[i]
                    return

    def _flush(self, link: _Link) -> None:
        for sock, outbox in ((link.upstream, link.to_upstream), (link.client, link.to_client)):
            if not outbox:
                continue
            try:
                sent = sock.send(outbox)
            except (BlockingIOError, InterruptedError):
                continue
            del outbox[:sent]

    @staticmethod
    def _finished(link: _Link) -> bool:
        if link.client_eof and link.upstream_eof:
            return True
        if link.client_eof and not link.to_upstream:
            return link.drop is None  # a command whose reply is to be lost still runs
        return link.upstream_eof and not link.to_client

    def _drop_link(
        self, link: _Link, selector: selectors.BaseSelector, interest: dict[socket.socket, int]
    ) -> None:
        for sock in link.sockets():
            if interest.pop(sock, 0):
                with contextlib.suppress(KeyError, ValueError, OSError):
                    selector.unregister(sock)
        if link.closed:
            return
        link.closed = True
        with self._mutex:
            with contextlib.suppress(ValueError):
                self._links.remove(link)
            if link.drop is not None:
                self.dropped += 1
                if link.drop in self._freeze_after:
                    self._freeze_after.discard(link.drop)
                    self._frozen = True  # nothing is serviced from now on
        if link.drop is not None:
            link.drop.set()  # before the client can see its connection close
        self._close_sockets(link)

    def _close_all(
        self, selector: selectors.BaseSelector, interest: dict[socket.socket, int]
    ) -> int:
        with self._mutex:
            links = list(self._links)
        for link in links:
            self._drop_link(link, selector, interest)
        return len(links)

    @staticmethod
    def _close_sockets(link: _Link) -> None:
        for sock in link.sockets():
            with contextlib.suppress(OSError):
                sock.close()
