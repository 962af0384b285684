"""Where the heavy work of a step runs: in the trainer's own process, or on Ray actors.

backends.py     the operations the loop needs (generate, score, log-probs, update) and the local backend
ray_backend.py  the same operations on Ray actors: learners and rollout workers
ray_worker.py   the body of those actors
ray_shards.py   how a step's work is split over workers and merged back (pure: no Ray, no torch)
ray_cluster.py  connecting to a Ray cluster, or starting a local one, and asking it for room
resources.py    what a run asks for (CPUs, GPUs, memory), from its config alone
"""
