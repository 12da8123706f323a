# Board definitions (boards/*.toml): the host imports this folder as picoring.boards to find them.
