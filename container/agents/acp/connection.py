"""A JSON-RPC 2.0 connection to an agent over its stdin and stdout, on trio.

:func:`open_connection` starts a reader task and yields a :class:`Connection`:
:meth:`Connection.request` sends a request and waits for its answer (ids are ints from
0), :meth:`Connection.notify` sends a notification. What the agent sends goes to the
:class:`Handler`, in order: a notification to :meth:`Handler.notification` (in the
reader, synchronously); a request to :meth:`Handler.request`, called synchronously too
(so what it does at once keeps its place among the notifications), whose awaitable runs
in its own task and is answered with its value, or with the error of the
:class:`RpcFault` it raises; an unknown method (``None`` from the handler) is answered
``-32601``.

Bad input (see :mod:`.wire`, and a response to no request) and end of output fail the
connection: every pending and later :meth:`~Connection.request` raises that
:class:`~.errors.ProtocolError` or :class:`~.errors.AgentExitedError`.
Cancellation: a cancelled :meth:`~Connection.request` is abandoned (JSON-RPC has no
cancel; its late answer is dropped); leaving the context cancels the reader and the
tasks waiting on handlers (nothing is answered for those).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, Protocol

import trio

from ...errors import ContainerError
from .errors import AgentExitedError, ProtocolError, RemoteError
from .wire import (
    METHOD_NOT_FOUND,
    ErrorResponse,
    Message,
    MessageReader,
    Notification,
    Request,
    RequestId,
    Response,
    encode,
)

__all__ = ["Connection", "Handler", "Reply", "RpcFault", "open_connection"]

_READ_SIZE: Final = 65536
_ABANDONED_KEPT: Final = 1024


class RpcFault(ContainerError):
    """Raised by a request handler: the agent gets this JSON-RPC error as the answer."""

    default_code = "agent_protocol_error"

    def __init__(self, rpc_code: int, message: str) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code


class Handler(Protocol):
    """What the agent may ask of the client."""

    def notification(self, method: str, params: Any) -> None:
        """Take a notification; raise :class:`ProtocolError` to fail the connection."""

    def request(self, method: str, params: Any) -> Awaitable[Any] | None:
        """Start answering a request (``None``: unknown method)."""


class Reply:
    """The answer to one request, once it comes."""

    def __init__(
        self,
        connection: Connection,
        ident: RequestId,
        method: str,
        receive: trio.MemoryReceiveChannel[Response | ErrorResponse],
    ) -> None:
        self._connection = connection
        self.id = ident
        self.method = method
        self._receive = receive
        self._answer: Response | ErrorResponse | None = None

    @property
    def answered(self) -> bool:
        """Whether the answer has been received."""
        return self._answer is not None

    async def result(self) -> Any:
        """Wait for the answer: its result, or :class:`RemoteError`, or the failure."""
        if self._answer is None:
            try:
                self._answer = await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                failure = self._connection.failure
                assert failure is not None
                raise failure from None
        if isinstance(self._answer, ErrorResponse):
            answer = self._answer
            raise RemoteError(self.method, answer.code, answer.message, answer.data)
        return self._answer.result

    def abandon(self) -> None:
        """Give up on the answer if it has not come (its late arrival is dropped)."""
        if self._answer is None and self._connection._forget(self.id):
            self._receive.close()


class Connection:
    """One side of the JSON-RPC conversation (see the module doc)."""

    def __init__(self, send: trio.abc.SendStream, handler: Handler, nursery: trio.Nursery) -> None:
        self._send_stream = send
        self._handler = handler
        self._nursery = nursery
        self._send_lock = trio.Lock()
        self._next_id = 0
        self._pending: dict[RequestId, trio.MemorySendChannel[Response | ErrorResponse]] = {}
        self._abandoned: dict[RequestId, None] = {}
        self.failure: ContainerError | None = None
        self.failed = trio.Event()
        self.last_heard = trio.current_time()
        """When the agent last wrote something (trio clock)."""

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and return its result; raise :class:`RemoteError` for an error
        answer, or the connection's failure."""
        reply = await self.start_request(method, params)
        try:
            return await reply.result()
        finally:
            reply.abandon()

    async def start_request(self, method: str, params: Any = None) -> Reply:
        """Send a request; its :class:`Reply` waits for the answer (and may be waited on
        again after a cancelled wait)."""
        if self.failure is not None:
            raise self.failure
        ident = self._next_id
        self._next_id += 1
        send, receive = trio.open_memory_channel[Response | ErrorResponse](1)
        self._pending[ident] = send
        reply = Reply(self, ident, method, receive)
        try:
            await self._send(Request(ident, method, params))
        except BaseException:
            reply.abandon()
            raise
        return reply

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification."""
        await self._send(Notification(method, params))

    async def _send(self, message: Message) -> None:
        data = encode(message)
        async with self._send_lock:
            try:
                await self._send_stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                failure = AgentExitedError("the agent closed its input")
                self._fail(failure)
                raise failure from exc

    def _forget(self, ident: RequestId) -> bool:
        """Stop waiting for ``ident``'s answer; whether it was still awaited."""
        if self._pending.pop(ident, None) is None:
            return False
        self._abandoned[ident] = None
        if len(self._abandoned) > _ABANDONED_KEPT:
            del self._abandoned[next(iter(self._abandoned))]
        return True

    def _fail(self, failure: ContainerError) -> None:
        if self.failure is not None:
            return
        self.failure = failure
        self.failed.set()
        for send in self._pending.values():
            send.close()

    async def read(self, receive: trio.abc.ReceiveStream) -> None:
        """Read and dispatch until end of output or bad input (which fail the connection)."""
        reader = MessageReader()
        try:
            while chunk := await receive.receive_some(_READ_SIZE):
                self.last_heard = trio.current_time()
                for message in reader.feed(bytes(chunk)):
                    self._dispatch(message)
            for message in reader.close():
                self._dispatch(message)
        except ProtocolError as exc:
            self._fail(exc)
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self._fail(AgentExitedError("the agent closed its output"))

    def _dispatch(self, message: Message) -> None:
        if isinstance(message, Notification):
            self._handler.notification(message.method, message.params)
        elif isinstance(message, Request):
            try:
                awaitable = self._handler.request(message.method, message.params)
            except RpcFault as fault:
                refusal = ErrorResponse(message.id, fault.rpc_code, fault.message)
                self._nursery.start_soon(self._send_quietly, refusal)
                return
            if awaitable is None:
                unknown = ErrorResponse(
                    message.id, METHOD_NOT_FOUND, f"method not found: {message.method}"
                )
                self._nursery.start_soon(self._send_quietly, unknown)
            else:
                self._nursery.start_soon(self._answer, message.id, awaitable)
        elif message.id is None:
            assert isinstance(message, ErrorResponse)
            raise ProtocolError(
                f"the agent could not read a message: {message.message} ({message.code})"
            )
        elif (send := self._pending.pop(message.id, None)) is not None:
            send.send_nowait(message)
        elif message.id in self._abandoned:
            del self._abandoned[message.id]
        else:
            raise ProtocolError(f"a response to no request (id {message.id!r})")

    async def _answer(self, ident: RequestId, awaitable: Awaitable[Any]) -> None:
        try:
            result = await awaitable
        except RpcFault as fault:
            await self._send_quietly(ErrorResponse(ident, fault.rpc_code, fault.message))
            return
        await self._send_quietly(Response(ident, result))

    async def _send_quietly(self, message: Message) -> None:
        """Send an answer; a closed input is the connection's failure, seen elsewhere."""
        with suppress(AgentExitedError):
            await self._send(message)


@asynccontextmanager
async def open_connection(
    send: trio.abc.SendStream, receive: trio.abc.ReceiveStream, handler: Handler
) -> AsyncIterator[Connection]:
    """A connection reading ``receive`` in the background until the context ends."""
    async with trio.open_nursery() as nursery:
        connection = Connection(send, handler, nursery)
        nursery.start_soon(connection.read, receive)
        try:
            yield connection
        finally:
            nursery.cancel_scope.cancel()
