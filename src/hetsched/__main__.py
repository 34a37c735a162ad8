"""``python -m hetsched``: the same as the ``hetsched`` command."""

from hetsched.cli import main

main()
