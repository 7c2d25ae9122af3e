"""`python -m resourcesync` runs the command line."""

from ._program import entry

entry()
