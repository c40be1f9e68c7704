"""``python -m rubricsvc``: the same as the ``rubricsvc`` command."""

from rubricsvc.cli import main

if __name__ == "__main__":  # importing the module (a tool walking the package) runs nothing
    main()
