"""Every schedule of a small ring, exhaustively: model and search (fault-free), lossy_model
and lossy (the recovery under bounded faults), fidelity (the paper's claims against both)."""
