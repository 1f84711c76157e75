"""`python -m assay`: the command line."""

from .cli.app import main

if __name__ == "__main__":
    main()
