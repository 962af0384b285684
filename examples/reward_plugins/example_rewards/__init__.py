"""Example reward plugins for DAPO (see README.md beside this folder)."""
