"""The TUI's widgets: one widget per file."""
