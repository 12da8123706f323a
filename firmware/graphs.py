# Logical trees and graphs over the ring's nodes, for the protocols that send along them
# (proto_raymond.py, proto_dag.py): built once when a node starts, the same on every board
# (no `random` module: MicroPython's and CPython's differ; a linear congruential generator
# here is the same everywhere). The ring is physical and fixed; these are the choice of
# the protocol's options: an edge i -> j is a message routed over the ring, (j - i) mod n
# hop frames.
#
# Trees (option tree=): binary  heap order, node i's parent (i - 1) // 2
#                       path    i's parent i - 1 (ring order: i -> i + 1 one hop, back n - 1)
#                       star    every node's parent 0
#                       random:SEED  a random recursive tree: i's parent uniform in 0..i-1
# Graphs (option graph=): complete, ring (i - i+1 mod n), random:P[:SEED] (each pair an
# edge with probability P, plus the random tree of SEED, so that the graph is connected),
# or any tree above (binary, path, star; tree:random:SEED, as random: names the graph).
# Allocates (lists): call it from __init__ only.


def _lcg(x):
    """The next state of the generator (31 bits; glibc's constants)."""
    return (x * 1103515245 + 12345) & 0x7FFFFFFF


def _seed(text, what):
    try:
        s = int(text)
    except ValueError:
        raise ValueError("%s: the seed must be an integer, not %r" % (what, text))
    return _lcg(s & 0x7FFFFFFF)


def tree_parents(kind, n):
    """parent[i] of the tree named kind over nodes 0..n-1 (parent[0] = -1; every parent
    index below its child's)."""
    parent = [-1] * n
    if kind == "binary":
        for i in range(1, n):
            parent[i] = (i - 1) // 2
    elif kind == "path":
        for i in range(1, n):
            parent[i] = i - 1
    elif kind == "star":
        for i in range(1, n):
            parent[i] = 0
    elif kind.startswith("random:") or kind == "random":
        x = _seed(kind[7:] or "0", "tree=" + kind)
        for i in range(1, n):
            x = _lcg(x)
            parent[i] = (x >> 8) % i
    else:
        raise ValueError("tree=%s: one of binary, path, star, random:SEED" % kind)
    return parent


def tree(kind, n):
    """The tree's adjacency lists."""
    adj = [[] for _ in range(n)]
    for i, p in enumerate(tree_parents(kind, n)):
        if p >= 0:
            adj[i].append(p)
            adj[p].append(i)
    return adj


def graph(kind, n):
    """The graph's adjacency lists (each sorted): complete, ring, random:P[:SEED], or a tree."""
    if kind == "complete":
        return [[j for j in range(n) if j != i] for i in range(n)]
    if kind == "ring":
        adj = [[] for _ in range(n)]
        for i in range(n):
            j = (i + 1) % n
            if j not in adj[i]:
                adj[i].append(j)
                adj[j].append(i)
        return [sorted(a) for a in adj]
    if kind.startswith("random:"):
        p, _, seed = kind[7:].partition(":")
        try:
            p = float(p)
        except ValueError:
            raise ValueError("graph=%s: random:P[:SEED], P a probability" % kind)
        if not 0 <= p <= 1:
            raise ValueError("graph=%s: P must be within 0..1" % kind)
        adj = tree("random:" + (seed or "0"), n)  # connected whatever P draws
        x = _seed(seed or "0", "graph=" + kind)
        for i in range(n):
            for j in range(i + 1, n):
                x = _lcg(x)
                if (x >> 8) < p * (1 << 23) and j not in adj[i]:
                    adj[i].append(j)
                    adj[j].append(i)
        return [sorted(a) for a in adj]
    try:
        return [sorted(a) for a in tree(kind[5:] if kind.startswith("tree:") else kind, n)]
    except ValueError:
        raise ValueError("graph=%s: one of complete, ring, random:P[:SEED], or a tree: binary, path, star, "
                         "tree:random:SEED" % kind)


def bfs(adj, root):
    """(dist, toward): each node's distance from root along the graph's edges, and its
    neighbour one step closer to root (the lowest-numbered such; root's own: root)."""
    n = len(adj)
    dist = [-1] * n
    toward = [root] * n
    dist[root] = 0
    frontier = [root]
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    toward[v] = u
                    nxt.append(v)
        frontier = nxt
    if min(dist) < 0:
        raise ValueError("the graph is not connected")
    return dist, toward


def diameter(adj):
    """The longest shortest path between two nodes, in edges."""
    return max(max(bfs(adj, r)[0]) for r in range(len(adj)))
