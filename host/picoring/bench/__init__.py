"""Benchmarks, one module per `picoring bench X`: sim (against SimPy), ring (hops on a virtual
ring), chip (the node loop on an emulated RP2040), soak (recovery under faults), dash."""
