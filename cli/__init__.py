"""The ``kvbudget`` command line: thin typer wrappers over library calls."""
