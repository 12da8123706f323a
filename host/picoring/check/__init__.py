"""Checking what a run did: the trace format (trace), the bounds and safety over it
(checker), the virtual ring's shared-counter audit, the printed report and the plots."""
