"""What the run lifecycle tells other apps, without importing them."""

from django.dispatch import Signal

run_finished = Signal()
"""Sent with ``run`` once a run reached a final status (succeeded, failed, cancelled), by ``Run.finish``
only when its update won: the notifications app queues the owner's notifications on it."""
