"""`python -m resourcesync` runs the command line."""

from .cli import run

run()
