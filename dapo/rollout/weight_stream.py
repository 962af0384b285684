"""Stream `(name, tensor)` pairs from this process to the vLLM worker processes, one tensor at a time.

The vllm engine's weight sync: the engine (the sender) listens on a Unix socket in a private folder, each
vLLM worker connects (`receive`, inside vLLM's `reload_weights`), and every tensor travels as a small JSON
header and its raw bytes. Nothing is written to a file, neither sender nor receiver ever holds more than
the tensor in flight, and no pickle crosses the socket: a peer can only send names, dtypes, shapes and
bytes. A worker proves it was invited with the token it was given through vLLM's RPC.

Wire format, per message: 4-byte big-endian header length, the JSON header, then `nbytes` raw bytes.
Headers: {"token"} (worker -> sender, first), {"name", "dtype", "shape", "nbytes"} (one tensor), and
{"end": count} (no more tensors).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import shutil
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

import torch

_LENGTH = struct.Struct(">I")
MAX_HEADER_BYTES = 1 << 16


@dataclass
class SendStats:
    """What one `WeightSender.send` moved."""

    tensors: int = 0
    bytes: int = 0
    seconds: float = 0.0


class WeightSender:
    """The sending end: a listening Unix socket in a private folder, removed by `close`.

    Args:
        accept_timeout_s: how long `send` waits for each worker to connect.
        io_timeout_s: how long one socket operation may block (a worker that stopped reading).
    """

    def __init__(self, accept_timeout_s: float = 300.0, io_timeout_s: float = 600.0) -> None:
        self._folder = tempfile.mkdtemp(prefix="dapo-weights-")
        self.path = os.path.join(self._folder, "sock")
        self.token = secrets.token_hex(16)
        self.accept_timeout_s = accept_timeout_s
        self.io_timeout_s = io_timeout_s
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        os.chmod(self.path, 0o600)
        self._server.listen()
        self._server.settimeout(0.2)

    @property
    def address(self) -> tuple[str, str]:
        """(socket path, token): what each worker needs to connect."""
        return self.path, self.token

    def send(
        self,
        pairs: Iterable[tuple[str, torch.Tensor]],
        workers: int,
        keep_waiting: Callable[[], bool] = lambda: True,
    ) -> SendStats:
        """Accept `workers` connections, then send every pair to each of them, in order.

        `keep_waiting` is polled while waiting for connections: when it turns False (the RPC that should
        connect has ended), waiting stops with an error instead of running into the timeout.
        """
        connections: list[socket.socket] = []
        stats = SendStats()
        started = time.perf_counter()
        try:  # closing every accepted connection on any error lets their workers fail instead of waiting
            for _ in range(workers):
                connections.append(self._accept(keep_waiting))
            for name, tensor in pairs:
                header, payload = _encode(name, tensor)
                for conn in connections:
                    _send_message(conn, header, payload)
                stats.tensors += 1
                stats.bytes += payload.nbytes
            for conn in connections:
                _send_message(conn, {"end": stats.tensors}, memoryview(b""))
        finally:
            for conn in connections:
                conn.close()
        stats.seconds = time.perf_counter() - started
        return stats

    def _accept(self, keep_waiting: Callable[[], bool]) -> socket.socket:
        deadline = time.monotonic() + self.accept_timeout_s
        while True:
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                if not keep_waiting():
                    raise ConnectionError(
                        "the vLLM workers stopped before connecting for the weights"
                    ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"no vLLM worker connected for the weights within {self.accept_timeout_s:.0f} s"
                    ) from None
                continue
            conn.settimeout(self.io_timeout_s)
            header, _ = _receive_message(conn)
            if hmac.compare_digest(str(header.get("token", "")), self.token):
                return conn
            conn.close()  # not one of ours: keep waiting for the workers

    def close(self) -> None:
        self._server.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> WeightSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def receive(
    path: str, token: str, device: str | torch.device = "cpu"
) -> Generator[tuple[str, torch.Tensor], None, None]:
    """The receiving end (runs in a vLLM worker): connect, then yield each tensor on `device` as it arrives.

    Raises ConnectionError when the stream ends before the sender's end marker.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        _send_message(conn, {"token": token}, memoryview(b""))
        received = 0
        while True:
            header, payload = _receive_message(conn)
            if "end" in header:
                if header["end"] != received:
                    raise ConnectionError(f"the sender sent {header['end']} tensors, {received} arrived")
                return
            received += 1
            yield header["name"], _decode(header, payload).to(device)


def _encode(name: str, tensor: torch.Tensor) -> tuple[dict[str, Any], memoryview]:
    """The header and raw bytes of one tensor (gathered first when it is a DTensor shard)."""
    full_tensor = getattr(tensor, "full_tensor", None)
    if callable(full_tensor):
        tensor = full_tensor()
    host = tensor.detach().to("cpu").contiguous()
    raw = host.reshape(-1).view(torch.uint8).numpy()
    header: dict[str, Any] = {"name": name, "dtype": str(host.dtype).removeprefix("torch.")}
    header.update(shape=list(host.shape), nbytes=raw.nbytes)
    return header, memoryview(raw.data).cast("B")


def _decode(header: dict, payload: bytearray) -> torch.Tensor:
    dtype = getattr(torch, str(header["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{header['name']}: unknown dtype {header['dtype']!r}")
    if not payload:
        return torch.empty(header["shape"], dtype=dtype)
    return torch.frombuffer(payload, dtype=dtype).reshape(header["shape"])


def _send_message(conn: socket.socket, header: dict, payload: memoryview) -> None:
    encoded = json.dumps(header).encode()
    conn.sendall(_LENGTH.pack(len(encoded)) + encoded)
    if payload.nbytes:
        conn.sendall(payload)


def _receive_message(conn: socket.socket) -> tuple[dict, bytearray]:
    (length,) = _LENGTH.unpack(_receive_exactly(conn, _LENGTH.size))
    if length > MAX_HEADER_BYTES:
        raise ConnectionError(f"weight stream: a {length}-byte header is not one of ours")
    header = json.loads(bytes(_receive_exactly(conn, length)))
    if not isinstance(header, dict):
        raise ConnectionError("weight stream: malformed header")
    return header, _receive_exactly(conn, int(header.get("nbytes", 0)))


def _receive_exactly(conn: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        got = conn.recv_into(view[done:])
        if got == 0:
            raise ConnectionError(f"weight stream closed after {done} of {size} bytes")
        done += got
    return buffer
