"""``python -m kvbudget``: the ``kvbudget`` command, for an environment whose scripts folder is
not on ``PATH`` (the same start as the console script: see :mod:`kvbudget.cli.main`)."""

from kvbudget.cli.main import main

if __name__ == "__main__":
    main()
