"""A loopback TCP relay that times a real browser's Streamlit requests on the wire.

``WireRelay(server_port)`` listens on 127.0.0.1 (an ephemeral port) and passes every byte unchanged to the
Streamlit server on 127.0.0.1:``server_port``. Plain HTTP connections are relayed blind. On the connection
that upgrades to ``/_stcore/stream`` it also reads the WebSocket frames (RFC 6455, with permessage-deflate,
RFC 7692, as chromium and the server negotiate it), decodes the protobufs and records, with ``time.time()``:

* ``("sent", t)`` when a ``BackMsg.rerun_script`` the user caused (a full run, or a fragment's run for a widget
  inside it; not a fragment's timed auto-rerun) has passed from the browser;
* ``("finished", t)`` when a ``ForwardMsg.script_finished`` (a full run or a fragment run finished successfully)
  has passed from the server.

These are exactly the two moments the load generator measures between on its own socket, so a browser
session's request times can be compared with the generator's: both on the wire, neither delayed by a
renderer that is busy drawing (chromium's devtools frame events are raised by the renderer, after it has
read the frame).
"""
from __future__ import annotations

import asyncio
import struct
import threading
import time
import zlib

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from loadgen import HOST

_CHUNK = 65536
_HEAD_LIMIT = 65536
_DONE = (ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)  # a full run, a fragment run


def _deflate_params(response_head: bytes) -> dict[str, str] | None:
    """The permessage-deflate parameters the server accepted (None when the connection is not compressed)."""
    for line in response_head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "sec-websocket-extensions" and "permessage-deflate" in value:
            params = [p.strip() for p in value.split(";")]
            return dict((p.split("=", 1) + [""])[:2] for p in params[1:] if p)
    return None


class _FrameReader:
    """Reassembles the messages of one direction of a WebSocket connection from the bytes that pass."""

    def __init__(self, masked: bool, deflate: dict[str, str] | None, no_takeover: bool):
        self.masked, self.deflate, self.no_takeover = masked, deflate, no_takeover
        self.buf = bytearray()
        self.parts: list[bytes] = []
        self.compressed = False
        self.opcode = 0
        self.inflater = zlib.decompressobj(-15)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Complete messages found so far: (opcode, payload)."""
        self.buf += data
        out = []
        while True:
            b = self.buf
            if len(b) < 2:
                return out
            fin, rsv1, opcode = b[0] & 0x80, b[0] & 0x40, b[0] & 0x0F
            has_mask, n, pos = b[1] & 0x80, b[1] & 0x7F, 2
            if n == 126:
                if len(b) < 4:
                    return out
                n, pos = struct.unpack(">H", b[2:4])[0], 4
            elif n == 127:
                if len(b) < 10:
                    return out
                n, pos = struct.unpack(">Q", b[2:10])[0], 10
            key = b""
            if has_mask:
                key, pos = bytes(b[pos:pos + 4]), pos + 4
            if len(b) < pos + n:
                return out
            payload = bytes(b[pos:pos + n])
            del self.buf[:pos + n]
            if key:
                payload = _unmask(payload, key)
            if opcode >= 8:  # control frames (close, ping, pong) may come between fragments
                continue
            if opcode != 0:
                self.opcode, self.compressed, self.parts = opcode, bool(rsv1), []
            self.parts.append(payload)
            if fin:
                msg = b"".join(self.parts)
                if self.compressed and self.deflate is not None:
                    if self.no_takeover:
                        self.inflater = zlib.decompressobj(-15)
                    msg = self.inflater.decompress(msg + b"\x00\x00\xff\xff")
                out.append((self.opcode, msg))
                self.parts = []


def _unmask(payload: bytes, key: bytes) -> bytes:
    """XOR with the 4-byte masking key repeated (RFC 6455 §5.3), as one big-integer operation."""
    n = len(payload)
    if n == 0:
        return payload
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big")


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    head = bytearray()
    while b"\r\n\r\n" not in head:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            break
        head += chunk
        if len(head) > _HEAD_LIMIT:
            break
    return bytes(head)


class WireRelay:
    """Relays 127.0.0.1:``port`` (ephemeral) to the server on 127.0.0.1:``server_port`` and records the times of
    full reruns sent and runs finished on its websocket connections. Runs its own event loop in a thread."""

    def __init__(self, server_port: int):
        self.server_port = int(server_port)
        self.events: list[tuple[str, float]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "WireRelay":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the wire relay did not start")
        return self

    def __exit__(self, *exc) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    async def _shutdown(self) -> None:
        """Stop listening and end every relayed connection (their tasks finish before the loop stops)."""
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def request_seconds(self, since: float, until: float) -> float | None:
        """From the first full rerun sent in [since, until] to the last run finished in it (None if either is
        missing)."""
        sent = [t for kind, t in list(self.events) if kind == "sent" and since <= t <= until]
        done = [t for kind, t in list(self.events) if kind == "finished" and since <= t <= until]
        if not sent or not done or max(done) < sent[0]:
            return None
        return max(done) - sent[0]

    # ------------------------------------------------------------------ the relay
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._client, HOST, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_connection(HOST, self.server_port)
        except OSError:
            c_writer.close()
            return
        try:
            head = await _read_head(c_reader)
            first_line = head.split(b"\r\n", 1)[0].lower()
            is_ws = first_line.startswith(b"get /_stcore/stream") and b"upgrade: websocket" in head.lower()
            s_writer.write(head)
            await s_writer.drain()
            if not is_ws:
                await asyncio.gather(self._pipe(c_reader, s_writer), self._pipe(s_reader, c_writer))
                return
            response = await _read_head(s_reader)
            c_writer.write(response)
            await c_writer.drain()
            params = _deflate_params(response)
            up = _FrameReader(True, params, params is not None and "client_no_context_takeover" in params)
            down = _FrameReader(False, params, params is not None and "server_no_context_takeover" in params)
            await asyncio.gather(self._pipe(c_reader, s_writer, up, self._on_back),
                                 self._pipe(s_reader, c_writer, down, self._on_forward))
        finally:
            for w in (c_writer, s_writer):
                w.close()

    async def _pipe(self, reader, writer, frames: _FrameReader | None = None, on_message=None) -> None:
        """Read eagerly and write through a queue: a receiver that is slow to read (a renderer busy drawing)
        delays what it gets, not when the relay sees the sender's bytes."""
        queue: asyncio.Queue = asyncio.Queue()

        async def write_all() -> None:
            try:
                while (data := await queue.get()) is not None:
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                if writer.can_write_eof():
                    try:
                        writer.write_eof()
                    except OSError:
                        pass

        sender = asyncio.create_task(write_all())
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if frames is not None:
                    now = time.time()
                    for opcode, msg in frames.feed(data):
                        if opcode == 2:
                            on_message(msg, now)
                queue.put_nowait(data)
        except (ConnectionError, OSError):
            pass
        finally:
            queue.put_nowait(None)
            await sender

    def _on_back(self, payload: bytes, now: float) -> None:
        msg = BackMsg()
        msg.ParseFromString(payload)
        if msg.WhichOneof("type") == "rerun_script" and not msg.rerun_script.is_auto_rerun:
            self.events.append(("sent", now))

    def _on_forward(self, payload: bytes, now: float) -> None:
        msg = ForwardMsg()
        msg.ParseFromString(payload)
        if msg.WhichOneof("type") == "script_finished" and msg.script_finished in _DONE:
            self.events.append(("finished", now))
