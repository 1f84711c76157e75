"""`python -m assay`: the command line."""

from assay.cli import main

if __name__ == "__main__":
    main()
