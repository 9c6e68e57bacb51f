"""``python -m zoo``: see :mod:`zoo.cli`."""

from zoo.commands import main

if __name__ == "__main__":
    main()
