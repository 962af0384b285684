"""Runs trained elsewhere, on the platform: TRL (``dapo.integrations.trl``: a ``TrainerCallback``) and verl
(``dapo.integrations.verl``: its dump and metric files, imported or followed as they grow).

``names`` maps the other trainers' metric names onto ours (standard library only: the web process imports
it); the modules that talk to a server use ``dapo.client`` only. See docs/integrations.md.
"""
