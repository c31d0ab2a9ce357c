"""``redlease.contrib.fastapi`` with the real frameworks: FastAPI served by uvicorn (in a thread,
on a socket of its own on a free port) and called by httpx, and FastAPI's and Starlette's
``TestClient``, against a private server.

What each test proves:
- a few hundred concurrent requests doing a read-modify-write of a Redis counter under
  ``exclusive("counter:{key}")``: no update lost, no 500, each answer a fencing token that grows
  with the counter;
- a busy lock answers the configured status with a detail that does not name the lock (and
  ``Retry-After`` for 503); the lock is released after an error, a cancelled request and a
  client that went away (held until the handler ends);
- the name comes from path and query parameters; a field that is neither is an error at
  start-up, a query parameter the request lacks a 422; a callable name is a dependency;
- an ``AsyncClient`` made at module level and used by two ``TestClient`` runs (two event loops)
  raises ``EventLoopError`` on the second, where the lifespan's client works in both;
- the lifespan entered from the app's own lifespan; Starlette without FastAPI;
- a leader task runs in exactly one of two app instances, moves when that one shuts down,
  and is cancelled and restarted when the leadership is lost.
"""

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import httpx
import pytest
import uvicorn
from fastapi import Depends, FastAPI, HTTPException
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

import redlease
from redlease import AsyncClient, EventLoopError, InvalidArgumentError, Lease
from redlease.contrib.fastapi import exclusive, get_client, leader_task, lifespan
from redlease.events import LockEvent

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

START_TIMEOUT = 20.0


def until(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.01)


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread, on a socket bound to a free port; its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", backlog=1024)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        until(lambda: server.started or not thread.is_alive(), START_TIMEOUT)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT)
        sock.close()


def counter_app(url: str) -> FastAPI:
    app = FastAPI(lifespan=lifespan(url))

    @app.post("/counters/{key}")
    async def bump(
        key: str,
        lease: Annotated[Lease, Depends(exclusive("counter:{key}", timeout=60))],
        client: Annotated[AsyncClient, Depends(get_client)],
    ) -> dict[str, int]:
        value = int(await client.redis.get(f"count:{key}") or 0)
        await asyncio.sleep(0.001)  # others run between the read and the write
        await client.redis.set(f"count:{key}", value + 1)
        return {"value": value + 1, "token": lease.fencing_token}

    return app


@pytest.mark.one_server  # the app's requests and the contrib's lock: any server
def test_concurrent_requests_lose_no_update(server: Any) -> None:
    key = uuid.uuid4().hex
    n = 300
    with serving(counter_app(server.url)) as base:

        async def many() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as http:
                posts = (http.post(f"/counters/{key}") for _ in range(n))
                return list(await asyncio.gather(*posts))

        answers = asyncio.run(many())
    assert sorted({r.status_code for r in answers}) == [200]
    values = sorted((r.json()["value"], r.json()["token"]) for r in answers)
    assert [v for v, _ in values] == list(range(1, n + 1))  # no update lost
    tokens = [t for _, t in values]
    assert tokens == sorted(tokens) and len(set(tokens)) == n  # each hold a greater token
    with redlease.Client.from_url(server.url) as client:
        assert int(client.redis.get(f"count:{key}")) == n


@pytest.mark.one_server  # the app's requests and the contrib's lock: any server
def test_deposit_recipe_loses_no_update_under_uvicorn(server: Any) -> None:
    """docs/fastapi.md's ``deposit`` endpoint, as written there (tests/integration/recipes.py),
    served by uvicorn: 200 concurrent deposits of 1, none lost."""
    from redlease.contrib.fastapi import get_client as app_client

    from .recipes import recipe

    app = FastAPI(lifespan=lifespan(server.url))
    namespace = {"app": app, "Annotated": Annotated, "Depends": Depends, "redlease": redlease}
    namespace |= {"exclusive": exclusive, "Client": Annotated[AsyncClient, Depends(app_client)]}
    recipe("fastapi.md", "deposit", namespace)
    account, n = uuid.uuid4().hex, 200
    with serving(app) as base:

        async def many() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as http:
                url = f"/accounts/{account}/deposit?amount=1"
                return list(await asyncio.gather(*(http.post(url) for _ in range(n))))

        answers = asyncio.run(many())
    assert sorted({r.status_code for r in answers}) == [200]
    assert sorted(r.json()["balance"] for r in answers) == list(range(1, n + 1))
    with redlease.Client.from_url(server.url) as client:
        assert int(client.redis.get(f"balance:{account}")) == n  # 0 lost updates


@pytest.mark.parametrize("earlier_run", [False, True])
def test_testclient_without_with_says_the_lifespan_has_not_run(
    server: Any, earlier_run: bool
) -> None:
    """``TestClient(app)`` without ``with`` runs no lifespan: the error says so (it told to
    create the client with the lifespan the app has, or, after an earlier run of the app,
    'client is closed')."""
    app, key = counter_app(server.url), uuid.uuid4().hex
    if earlier_run:
        with TestClient(app) as http:
            assert http.post(f"/counters/{key}").status_code == 200
    http = TestClient(app)
    with pytest.raises(InvalidArgumentError, match="its lifespan has not run") as raised:
        http.post(f"/counters/{key}")
    assert "with TestClient(app) as" in str(raised.value)


def test_lifespan_listeners_reach_each_run_s_client(server: Any) -> None:
    """``lifespan(url, listeners=[...])`` adds them to the client of every run of the app
    (under uvicorn, then a TestClient run: two event loops, two clients)."""
    seen: list[tuple[str, str]] = []

    def listener(event: LockEvent) -> None:
        seen.append((event.kind, event.name))

    app = FastAPI(lifespan=lifespan(server.url, listeners=[listener]))
    key = uuid.uuid4().hex

    @app.post("/work/{key}")
    async def work(key: str, lease: Annotated[Lease, Depends(exclusive("work:{key}"))]) -> Any:
        return {"token": lease.fencing_token}

    with serving(app) as base:
        assert httpx.post(f"{base}/work/{key}", timeout=60).status_code == 200
    with TestClient(app) as http:
        assert http.post(f"/work/{key}").status_code == 200
    until(lambda: seen.count(("released", f"work:{key}")) == 2, 20)
    assert seen.count(("acquired", f"work:{key}")) == 2
    with pytest.raises(InvalidArgumentError, match="listeners: cannot import 'no"):
        lifespan(server.url, listeners=["no.such.thing"])
    with pytest.raises(InvalidArgumentError, match="is not a listener"):
        lifespan(server.url, listeners=[42])  # type: ignore[list-item]  # wrong on purpose


def busy_app(url: str) -> FastAPI:
    app = FastAPI(lifespan=lifespan(url))

    @app.get("/orders/{order_id}")
    async def order(
        order_id: int, lease: Annotated[Lease, Depends(exclusive("order:{order_id}"))]
    ) -> Any:
        return {"order": order_id, "token": lease.fencing_token}

    @app.get("/slow/{order_id}")
    async def slow(
        order_id: int,
        lease: Annotated[Lease, Depends(exclusive("order:{order_id}", on_busy=503, timeout=0.2))],
    ) -> Any:
        return {"order": order_id}

    @app.get("/fails/{order_id}")
    async def fails(
        order_id: int, lease: Annotated[Lease, Depends(exclusive("order:{order_id}"))]
    ) -> Any:
        raise ValueError("the handler failed")

    @app.get("/refused/{order_id}")
    async def refused(
        order_id: int, lease: Annotated[Lease, Depends(exclusive("order:{order_id}"))]
    ) -> Any:
        raise HTTPException(418, "no")

    return app


def test_busy_answers_the_status_and_errors_release(server: Any) -> None:
    order = uuid.uuid4().int % 10**9
    with (
        redlease.Client.from_url(server.url) as other,
        TestClient(busy_app(server.url), raise_server_exceptions=False) as http,
    ):
        held = other.lock(f"order:{order}")
        with held.hold(timeout=5):
            busy = http.get(f"/orders/{order}")
            assert busy.status_code == 409
            detail = busy.json()["detail"]
            assert detail == "busy: this resource is in use by another request"
            assert "order" not in detail  # the internal lock name is not shown (was)
            assert "retry-after" not in busy.headers
            unavailable = http.get(f"/slow/{order}")
            assert unavailable.status_code == 503
            assert unavailable.headers["retry-after"] == "1"
            assert "waited 0.2 s" in unavailable.json()["detail"]
        first = http.get(f"/orders/{order}")
        assert first.status_code == 200
        assert first.json()["token"] > 0
        assert http.get(f"/fails/{order}").status_code == 500
        assert not held.locked()  # released after the error
        assert http.get(f"/refused/{order}").status_code == 418
        assert not held.locked()
        again = http.get(f"/orders/{order}")
        assert again.status_code == 200
        assert again.json()["token"] > first.json()["token"]


def test_released_when_the_client_goes_away_after_the_handler(server: Any) -> None:
    """uvicorn lets a handler whose client disconnected run on: the lock stays held until it
    ends, then is released."""
    gate = threading.Event()
    entered = threading.Event()
    app = FastAPI(lifespan=lifespan(server.url))
    name = f"job:{uuid.uuid4().hex}"

    @app.post("/jobs/{job}")
    async def job(
        job: str, lease: Annotated[Lease, Depends(exclusive("job:{job}", timeout=0))]
    ) -> Any:
        entered.set()
        await asyncio.to_thread(gate.wait, 30)
        return {"done": True}

    job_id = name.split(":", 1)[1]
    with serving(app) as base, redlease.Client.from_url(server.url) as other:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(f"POST /jobs/{job_id} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert entered.wait(10)
        # the client is gone
        held = other.lock(name)
        assert held.locked()  # the handler still runs: the lock is still held
        assert httpx.post(f"{base}/jobs/{job_id}", timeout=10).status_code == 409
        gate.set()
        until(lambda: not held.locked())
        entered.clear()
        gate_again = threading.Timer(0.1, gate.set)
        gate_again.start()
        assert httpx.post(f"{base}/jobs/{job_id}", timeout=30).status_code == 200


async def test_released_when_the_request_is_cancelled(server: Any) -> None:
    app = FastAPI()
    entered = asyncio.Event()
    name = uuid.uuid4().hex

    @app.get("/work/{name}")
    async def work(
        name: str, lease: Annotated[Lease, Depends(exclusive("work:{name}", timeout=0))]
    ) -> Any:
        entered.set()
        await asyncio.sleep(60)

    async with lifespan(server.url)(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            request = asyncio.get_running_loop().create_task(http.get(f"/work/{name}"))
            await asyncio.wait_for(entered.wait(), 10)
            held = app.state.redlease.lock(f"work:{name}")
            assert await held.locked()
            request.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await request
            deadline = time.monotonic() + 10
            while await held.locked():
                assert time.monotonic() < deadline, "the lock was not released"
                await asyncio.sleep(0.01)


def test_names_from_path_and_query_parameters(server: Any) -> None:
    app = FastAPI(lifespan=lifespan(server.url))

    def report_name(day: int, region: str = "eu") -> str:
        return f"report:{region}:{day}"

    @app.get("/reports/{region}")
    async def report(
        region: str, day: str, lease: Annotated[Lease, Depends(exclusive("r:{region}:{day}"))]
    ):
        return {"token": lease.fencing_token}

    @app.get("/typed")
    async def typed(lease: Annotated[Lease, Depends(exclusive(report_name))]) -> Any:
        return {"token": lease.fencing_token}

    day = str(uuid.uuid4().int % 10**6)
    with TestClient(app) as http, redlease.Client.from_url(server.url) as other:
        with other.lock(f"r:eu:{day}").hold(timeout=5):
            assert http.get(f"/reports/eu?day={day}").status_code == 409  # the very name
            assert http.get(f"/reports/us?day={day}").status_code == 200
        missing = http.get("/reports/eu")
        assert missing.status_code == 422
        assert missing.json()["detail"][0]["loc"] == ["query", "day"]
        with other.lock(f"report:eu:{int(day)}").hold(timeout=5):
            typed_busy = http.get(f"/typed?day=0{day}")  # validated: 0123 is 123
            assert typed_busy.status_code == 409, typed_busy.text
        assert http.get(f"/typed?day={day}").status_code == 200
        assert http.get("/typed?day=x").status_code == 422


def test_a_field_neither_path_nor_query_fails_at_startup(server: Any) -> None:
    app = FastAPI(lifespan=lifespan(server.url))

    @app.get("/orders/{order_id}")
    async def order(
        order_id: int, lease: Annotated[Lease, Depends(exclusive("order:{oid}"))]
    ) -> Any:
        return {}

    with (
        pytest.raises(InvalidArgumentError, match=r"\{oid\}.*/orders/\{order_id\}"),
        TestClient(app),
    ):
        pass


def test_bad_arguments_are_refused_at_once() -> None:
    with pytest.raises(InvalidArgumentError, match="on_busy"):
        exclusive("a", on_busy=200)
    with pytest.raises(InvalidArgumentError, match="timeout must be >= 0"):
        exclusive("a", timeout=-1)
    with pytest.raises(InvalidArgumentError, match="field"):
        exclusive("a:{0}")
    with pytest.raises(InvalidArgumentError, match="lease"):
        exclusive("a", lease=0)
    with pytest.raises(InvalidArgumentError, match="url"):
        lifespan(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="restart_after"):
        leader_task("a", asyncio.sleep, restart_after=-1)


def test_a_module_level_client_fails_clearly_on_a_second_event_loop(server: Any) -> None:
    """Each TestClient runs the app on an event loop of its own: a client made at module
    level is bound to the first; the lifespan's client is made anew for each."""
    module_level = AsyncClient.from_url(server.url)
    app = FastAPI(lifespan=lifespan(server.url))
    name = uuid.uuid4().hex

    @app.get("/module")
    async def module() -> Any:
        async with module_level.lock(name).hold(timeout=5) as lease:
            return {"token": lease.fencing_token}

    @app.get("/lifespan")
    async def from_lifespan(lease: Annotated[Lease, Depends(exclusive(name, timeout=5))]) -> Any:
        return {"token": lease.fencing_token}

    with TestClient(app) as http:
        assert http.get("/module").status_code == 200
        assert http.get("/lifespan").status_code == 200
    with TestClient(app) as http:
        with pytest.raises(EventLoopError, match="lifespan") as raised:
            http.get("/module")
        assert isinstance(raised.value, RuntimeError)
        assert raised.value.name == name
        assert http.get("/lifespan").status_code == 200


def test_lifespan_entered_from_the_apps_own_lifespan(server: Any) -> None:
    seen: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def app_lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with lifespan(server.url, watchdog_timeout=5)(app) as state:
            seen["client"] = app.state.redlease
            assert state["redlease"] is app.state.redlease
            yield

    app = FastAPI(lifespan=app_lifespan)

    @app.get("/{item}")
    async def item(item: str, lease: Annotated[Lease, Depends(exclusive("item:{item}"))]) -> Any:
        return {"token": lease.fencing_token}

    with TestClient(app) as http:
        assert http.get(f"/{uuid.uuid4().hex}").status_code == 200
    with pytest.raises(redlease.ClientClosedError):  # closed with the app
        asyncio.run(seen["client"].lock("x").acquire())


def test_starlette_without_fastapi(server: Any) -> None:
    name = uuid.uuid4().hex

    async def endpoint(request: Request) -> JSONResponse:
        async with get_client(request).lock(name).hold(timeout=5) as lease:
            return JSONResponse({"token": lease.fencing_token})

    app = Starlette(routes=[Route("/", endpoint)], lifespan=lifespan(server.url))
    for _ in range(2):  # a client per run of the app
        with TestClient(app) as http:
            assert http.get("/").json()["token"] > 0


def _leader_app(url: str, name: str, identity: str, log: list[tuple[str, str]]) -> FastAPI:
    async def work(term: redlease.AsyncTerm) -> None:
        log.append((term.identity, "start"))
        try:
            await asyncio.sleep(3600)
        finally:
            log.append((term.identity, "stop"))

    task = leader_task(name, work, identity=identity, restart_after=0.1)
    return FastAPI(lifespan=lifespan(url, leader_tasks=[task], watchdog_timeout=3))


def test_a_leader_task_runs_in_one_instance_and_moves_at_shutdown(server: Any) -> None:
    name = f"jobs:{uuid.uuid4().hex}"
    log: list[tuple[str, str]] = []
    with redlease.Client.from_url(server.url) as watcher:
        election = watcher.election(name)
        with contextlib.ExitStack() as a_running:
            a_running.enter_context(TestClient(_leader_app(server.url, name, "a", log)))
            until(lambda: ("a", "start") in log)
            with TestClient(_leader_app(server.url, name, "b", log)):
                until(lambda: election.lock.statistics().waiters == 1)  # b campaigns
                assert election.leader() == "a"
                assert log == [("a", "start")]
                a_running.close()  # a shuts down: its task is cancelled, it resigns
                until(lambda: ("b", "start") in log)
                assert log == [("a", "start"), ("a", "stop"), ("b", "start")]
                assert election.leader() == "b"
            assert log[-1] == ("b", "stop")
        until(lambda: election.leader() is None)


def test_a_leader_task_is_cancelled_when_the_leadership_is_lost(server: Any) -> None:
    name = f"jobs:{uuid.uuid4().hex}"
    log: list[tuple[str, str]] = []
    with (
        redlease.Client.from_url(server.url) as watcher,
        TestClient(_leader_app(server.url, name, "a", log)),
    ):
        until(lambda: ("a", "start") in log)
        assert watcher.election(name).force_release()
        # its watchdog finds the hold gone (within 1 s): cancelled, then it campaigns again
        until(lambda: log.count(("a", "start")) == 2)
        assert log == [("a", "start"), ("a", "stop"), ("a", "start")]


def test_import_redlease_imports_no_web_framework() -> None:
    code = (
        "import sys, redlease; "
        "assert not {'fastapi', 'starlette'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_release_after_the_response_or_when_the_endpoint_returns(server: Any) -> None:
    """The default scope holds the lock while a streamed body is sent; ``scope="function"``
    releases it before the response goes out, so chained requests never find their own
    previous hold (with ``timeout=0``)."""
    app = FastAPI(lifespan=lifespan(server.url))
    name = uuid.uuid4().hex

    @app.get("/stream/{name}")
    async def stream(
        name: str,
        client: Annotated[AsyncClient, Depends(get_client)],
        lease: Annotated[Lease, Depends(exclusive("s:{name}"))],
    ) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"held while streaming: "
            yield str(await client.lock(f"s:{name}").locked()).encode()

        return StreamingResponse(body())

    @app.post("/chained/{name}")
    async def chained(
        name: str, lease: Annotated[Lease, Depends(exclusive("c:{name}"), scope="function")]
    ) -> Any:
        return {"token": lease.fencing_token}

    with TestClient(app) as http:
        assert http.get(f"/stream/{name}").text == "held while streaming: True"
        with redlease.Client.from_url(server.url) as other:
            assert not other.lock(f"s:{name}").locked()
        for _ in range(20):
            assert http.post(f"/chained/{name}").status_code == 200


@pytest.mark.parametrize("on_lost", ["log", "raise"])
def test_a_forced_release_before_the_request_ends(
    server: Any, on_lost: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator force-releases a request's lock while its endpoint runs; the endpoint then
    finishes its work. ``on_lost="log"`` (the default): the response is the endpoint's, the
    loss logged at WARNING; ``"raise"``: ``LeaseLostError`` from the dependency's exit, before
    the response (``scope="function"``): a 500. The app's client hears the loss once."""
    app = FastAPI(lifespan=lifespan(server.url))
    entered, gate = threading.Event(), threading.Event()
    order = uuid.uuid4().hex
    done: list[str] = []

    @app.post("/orders/{order}/pay")
    async def pay(
        order: str,
        lease: Annotated[
            Lease, Depends(exclusive("pay:{order}", on_lost=on_lost), scope="function")
        ],
    ) -> Any:
        entered.set()
        await asyncio.to_thread(gate.wait, 30)
        done.append(order)  # the work, done
        return {"paid": order}

    heard: list[redlease.LockEvent] = []
    with (
        caplog.at_level(logging.WARNING, logger="redlease.contrib.fastapi"),
        TestClient(app, raise_server_exceptions=False) as http,
        redlease.Client.from_url(server.url) as admin,
        ThreadPoolExecutor(1) as pool,
    ):
        app.state.redlease.add_listener(
            lambda event: heard.append(event) if event.kind == "lease_lost" else None
        )
        answer = pool.submit(http.post, f"/orders/{order}/pay")
        assert entered.wait(10)
        assert admin.lock(f"pay:{order}").force_release()
        gate.set()
        response = answer.result(30)
    assert done == [order]
    if on_lost == "log":
        assert (response.status_code, response.json()) == (200, {"paid": order})
        (record,) = [
            r
            for r in caplog.records
            if r.name == "redlease.contrib.fastapi" and f"'pay:{order}'" in r.getMessage()
        ]
        assert record.levelno == logging.WARNING and "response is kept" in record.getMessage()
    else:
        assert response.status_code == 500
    assert len(heard) == 1 and heard[0].name == f"pay:{order}"
    assert heard[0].cause in ("forced", "unknown")
    with pytest.raises(InvalidArgumentError, match="on_lost='ignore'; give 'log' or 'raise'"):
        exclusive("x", on_lost="ignore")


async def test_a_missing_field_fails_at_the_first_call_without_the_lifespan(
    server: Any,
) -> None:
    app = FastAPI()

    @app.get("/orders/{order_id}")
    async def order(
        order_id: int, lease: Annotated[Lease, Depends(exclusive("order:{oid}"))]
    ) -> Any:
        return {}

    async with AsyncClient.from_url(server.url) as client:
        app.state.redlease = client  # a client of the app's own, no start-up check
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            with pytest.raises(InvalidArgumentError, match=r"\{oid\}.*/orders/\{order_id\}"):
                await http.get("/orders/1")


def test_lock_is_the_former_name_of_exclusive() -> None:
    # ``client.lock(name)`` is a Lock: the dependency's former name is gone, and says so
    import redlease.contrib.fastapi as integration

    with pytest.raises(
        AttributeError,
        match=r"redlease\.contrib\.fastapi\.lock was renamed redlease\.contrib\.fastapi\.exclusive",
    ):
        integration.lock  # noqa: B018
    assert "lock" not in integration.__all__ and "exclusive" in integration.__all__
