"""The live dashboard: dashboard (the screen, its keys and event sources) over model (the
ring's state built from the events)."""
