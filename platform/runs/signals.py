"""What the run lifecycle tells other apps, without importing them."""

from django.dispatch import Signal

run_finished = Signal()
"""Sent with ``run`` once a run reached a final status (succeeded, failed, cancelled), by ``Run.finish``
only when its update won: the notifications app queues the owner's notifications on it."""

schedule_wanted = Signal()
"""Sent (runs.dispatch.schedule_on_commit) once a transaction that queued a run, freed one's room or
changed a priority commits: runs.scheduling answers with a pass. A signal, because the scheduler imports
the models that ask for it."""
