"""The TUI's screens: one screen per file."""
