"""The `kbroker` verbs beside `serve` and `cluster`, one module each; each defines `register(subparsers)`,
which adds its parser and sets `run` to a function of the parsed arguments returning the exit code."""
