"""Checking what a run did: the trace format (trace), the bounds and safety over it
(checker), the shared-counter audits (a virtual ring's file, the FRAM), the printed report and the plots."""
