"""The weight stream of the vllm engine, end to end over its Unix socket (receivers in threads stand in
for vLLM's worker processes)."""

from __future__ import annotations

import socket
import threading

import pytest
import torch

from dapo.rollout import weight_stream
from dapo.rollout.weight_stream import WeightSender, receive


def receive_in_threads(sender: WeightSender, workers: int) -> tuple[list[list], list[threading.Thread], list]:
    """Start `workers` receivers; each appends (name, tensor) to its own list as tensors arrive."""
    got: list[list] = [[] for _ in range(workers)]
    errors: list[BaseException] = []

    def run(out: list) -> None:
        try:
            for pair in receive(*sender.address):
                out.append(pair)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(out,), daemon=True) for out in got]
    for thread in threads:
        thread.start()
    return got, threads, errors


TENSORS = {
    "embed.weight": torch.randn(7, 5).to(torch.bfloat16),
    "norm.weight": torch.arange(5, dtype=torch.float32),
    "scalar": torch.tensor(3.5, dtype=torch.float64),
    "empty": torch.zeros(0, 4),
    "mask": torch.tensor([True, False, True]),
    "ids": torch.tensor([[1, -2], [3, 2**40]], dtype=torch.int64),
    "strided": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous: sent as its values
}


def test_every_worker_receives_every_tensor_bit_exact_in_order():
    with WeightSender() as sender:
        got, threads, errors = receive_in_threads(sender, workers=2)
        stats = sender.send(TENSORS.items(), workers=2)
        for thread in threads:
            thread.join(10)
    assert not errors
    assert stats.tensors == len(TENSORS)
    assert stats.bytes == sum(t.numel() * t.element_size() for t in TENSORS.values())
    for pairs in got:
        assert [name for name, _ in pairs] == list(TENSORS)
        for name, tensor in pairs:
            assert tensor.dtype == TENSORS[name].dtype and tensor.shape == TENSORS[name].shape
            assert torch.equal(tensor, TENSORS[name]), name


def test_the_sender_runs_at_most_a_tensor_or_two_ahead_of_the_worker():
    size = 1 << 19  # 2 MB per float32 tensor: far more than a socket buffer holds
    received: list[str] = []
    lead: list[int] = []

    def layers():
        for i in range(12):
            lead.append(i - len(received))  # tensors handed over but not yet received
            yield f"layers.{i}.weight", torch.full((size,), float(i))

    with WeightSender() as sender:

        def run() -> None:
            for name, tensor in receive(*sender.address):
                assert tensor[0].item() == float(name.split(".")[1])
                received.append(name)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        sender.send(layers(), workers=1)
        thread.join(10)
    assert len(received) == 12
    assert max(lead) <= 2, lead


def test_a_connection_without_the_token_is_turned_away_and_the_worker_still_served():
    with WeightSender() as sender:
        intruder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        intruder.connect(sender.path)
        weight_stream._send_message(intruder, {"token": "guess"}, memoryview(b""))
        got, threads, errors = receive_in_threads(sender, workers=1)
        sender.send([("w", torch.ones(2))], workers=1)
        threads[0].join(10)
        assert intruder.recv(1) == b""  # closed by the sender, sent nothing
        intruder.close()
    assert not errors and [name for name, _ in got[0]] == ["w"]


def test_waiting_for_workers_stops_when_the_rpc_has_ended():
    with WeightSender(accept_timeout_s=30) as sender:
        with pytest.raises(ConnectionError, match="stopped before connecting"):
            sender.send([("w", torch.ones(2))], workers=1, keep_waiting=lambda: False)


def test_waiting_for_workers_times_out():
    with WeightSender(accept_timeout_s=0.3) as sender:
        with pytest.raises(TimeoutError, match="no vLLM worker connected"):
            sender.send([("w", torch.ones(2))], workers=1)


def test_a_stream_cut_short_is_an_error_for_the_worker():
    with WeightSender() as sender:
        got, threads, errors = receive_in_threads(sender, workers=1)
        conn = sender._accept(lambda: True)
        header, payload = weight_stream._encode("w", torch.ones(4))
        weight_stream._send_message(conn, header, payload[:8])  # half the bytes, then hang up
        conn.close()
        threads[0].join(10)
    assert got == [[]] and len(errors) == 1 and isinstance(errors[0], ConnectionError)


def test_the_socket_folder_is_private_and_removed_on_close():
    import os
    import stat

    sender = WeightSender()
    folder = os.path.dirname(sender.path)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    sender.close()
    assert not os.path.exists(folder)


def test_a_worker_that_connected_is_hung_up_on_when_another_never_comes():
    with WeightSender(accept_timeout_s=0.5) as sender:
        got, threads, errors = receive_in_threads(sender, workers=1)
        with pytest.raises(TimeoutError):
            sender.send([("w", torch.ones(2))], workers=2)
        threads[0].join(10)
    assert not threads[0].is_alive() and got == [[]]
    assert len(errors) == 1 and isinstance(errors[0], ConnectionError)
