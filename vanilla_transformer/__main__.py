"""``python -m vanilla_transformer <command>``: the same as the ``vanilla-transformer`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
