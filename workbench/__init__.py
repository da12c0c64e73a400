"""kopt's two faces: the `kopt` CLI and the `kopt-tui` Textual app."""
