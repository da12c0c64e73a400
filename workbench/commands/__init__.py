"""One module per `kopt` command; each exposes `register(subparsers)`."""
