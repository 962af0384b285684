"""Developer tooling: the venv installer, the demo supervisor, the test runner and the lock builder.

Everything here uses the standard library only, so it runs under the system's python3.11 before the
project's virtualenv exists. Run the modules from the repository root: `python3.11 -m scripts.devstack`.
"""
