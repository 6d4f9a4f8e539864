"""``python -m sardeenz.cli``: what tests and the engine supervisor start servers with."""

from sardeenz.cli import main

main()
