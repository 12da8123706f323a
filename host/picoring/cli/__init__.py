"""The `picoring` command: main (the table of commands), one module per command family,
and common (what they share)."""
