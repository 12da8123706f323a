"""A ring of boards, real or virtual, over their USB serial: harness (a run), hostlink (the
link codec), ports, deploy, flash and mpy (getting the firmware on), discover, boarddefs, wiring."""
