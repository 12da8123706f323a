"""The discrete-event simulator: simcore (the loop, which also runs under MicroPython),
simulate (`picoring sim`) and workload (the request schedules, also used by ring runs)."""
