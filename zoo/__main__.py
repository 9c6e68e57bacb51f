"""``python -m zoo``: see :mod:`zoo.cli`."""

from zoo.cli import main

if __name__ == "__main__":
    main()
