"""`python -m vi` runs the same command-line app as the `vi` console script."""

from vi.cli.app import main

if __name__ == "__main__":
    main()
