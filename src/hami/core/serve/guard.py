"""The ASGI guard in front of every app: the request body's limit and deadline, direct routes,
and the app on our own worker threads with its response written from the event loop.

Hypercorn's WSGI bridge reads the whole body before it calls the app, but sets no deadline on it
and would hold a worker while a client does not read the response. ``Guard`` answers a body not
in within ``BODY_TIMEOUT_S`` of its head (408) or over the limit (413) with a line saying so, runs
the app (or a direct route's handler) on ``Workers``, and gives up on a client that does not read
its response within ``WRITE_TIMEOUT_S``. The server around it is ``hami.core.serve.server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any, Final

from hypercorn.app_wrappers import WSGIWrapper

from hami.core import klog

log = klog.get_logger(__name__)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
# A POST route served without WSGI: the whole body in; (status, content type, body) out.
Direct = Callable[[bytes], tuple[int, str, bytes]]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

BODY_TIMEOUT_S: Final = 10.0
WRITE_TIMEOUT_S: Final = 30.0


class Workers:
    """The app's threads. Daemon threads (asyncio's default executor joins its threads at exit):
    a request still running (a bind waiting on a node lock) must not hold the process once the
    daemon has stopped. A result goes straight to the awaiting loop's future: no
    ``concurrent.futures.Future`` in between, whose locks and chained callbacks cost about as much
    as a small request's handler."""

    def __init__(self, threads: int, name: str) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` on a worker; awaitable from the (running) event loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((loop, future, fn, args))
        return future

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, future, fn, args = item
            if future.cancelled():  # its request went away while it waited
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as err:  # handed to the awaiting coroutine
                error = err
            with contextlib.suppress(RuntimeError):  # the loop has closed: the server stopped
                loop.call_soon_threadsafe(_settle, future, result, error)

    def shutdown(self) -> None:
        """Let idle workers end; a busy one ends with its request (or with the process)."""
        for _ in self._threads:
            self._queue.put(None)


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Guard:
    """ASGI around Hypercorn's WSGI bridge (which reads the whole body before it calls the app):
    the body's size and deadline, the app on our workers, and its response sent from the loop.

    The bridge would hand each message of the response from the worker to the loop and wait there
    for it to be written (two thread hops per response, and a worker held by a client that does
    not read). Here the worker only records them; they are sent once the app has returned, each
    within ``WRITE_TIMEOUT_S``. A response is already whole in memory (Flask's, an exposition).
    A POST to a ``direct`` path skips the bridge: its body, read under the same limit and
    deadline, goes to the handler on a worker, and the handler's answer is sent as it is.
    """

    def __init__(
        self, app: WSGIApp, max_body: int, workers: Workers, direct: Mapping[str, Direct] | None = None,
    ) -> None:
        self._app = WSGIWrapper(app, max_body + 1)  # our limit answers first, with a message
        self._max_body = max_body
        self._workers = workers
        self._direct = dict(direct or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        replies: list[tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]] = []

        def record(func: Callable[..., Awaitable[None]], *args: Any) -> None:
            replies.append((func, args))  # on the worker: kept for the loop

        if scope["type"] != "http":  # lifespan: the bridge has nothing to run
            await self._app(scope, receive, send, self._workers.run, record)  # type: ignore[arg-type]
            return
        loop = asyncio.get_running_loop()
        size = 0
        phase = "body"
        # one timer per request: the body's deadline, none while the app runs, then the write's
        deadline = asyncio.timeout(BODY_TIMEOUT_S)

        async def sized_receive() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > self._max_body:
                raise _Refused(413, f"request body too large: limit {self._max_body} bytes")
            return message

        try:
            async with deadline:

                async def run_app(fn: Callable[..., Any], *args: Any) -> Any:
                    nonlocal phase
                    phase = "app"
                    deadline.reschedule(None)
                    result = await self._workers.run(fn, *args)
                    phase = "write"
                    deadline.reschedule(loop.time() + WRITE_TIMEOUT_S)
                    for func, recorded in replies:
                        await func(*recorded)
                    return result

                direct = self._direct.get(scope["path"]) if scope["method"] == "POST" else None
                if direct is None:
                    await self._app(scope, sized_receive, send, run_app, record)  # type: ignore[arg-type]
                    return
                body = await _read_body(sized_receive)
                status, content_type, reply = await run_app(direct, body)
                await send({"type": "http.response.start", "status": status, "headers": [
                    (b"content-type", content_type.encode("latin-1")),
                    (b"content-length", b"%d" % len(reply)),
                ]})
                await send({"type": "http.response.body", "body": reply})
        except TimeoutError:
            if not deadline.expired():  # the app's own, not our timer's
                raise
            if phase != "body":
                log.v(2).info("http: a client did not read its response within %ss; closing", WRITE_TIMEOUT_S)
                return
            await _refuse(send, _Refused(408, f"request body not received within {BODY_TIMEOUT_S:g}s"))
        except _Refused as err:
            await _refuse(send, err)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):  # the end, or the client went away (http.disconnect)
            return b"".join(chunks)


async def _refuse(send: Send, err: _Refused) -> None:
    body = f"{err}\n".encode()
    await send({"type": "http.response.start", "status": err.status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]})
    await send({"type": "http.response.body", "body": body})
