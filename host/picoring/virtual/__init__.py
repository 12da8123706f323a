"""virtual."""
