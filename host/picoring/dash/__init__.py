"""dash."""
