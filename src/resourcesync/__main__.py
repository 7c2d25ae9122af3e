"""`python -m resourcesync` runs the command line."""

from .cli import main

main()
