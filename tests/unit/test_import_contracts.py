"""The import graph keeps its layers and has no cycle.

The layers and the other contracts are declared in pyproject.toml (``[tool.importlinter]``)
and checked by ``lint-imports`` (import-linter); imports under ``TYPE_CHECKING`` and inside
functions count too. A cycle is any set of modules that import each other, directly or
through others: grimp (import-linter's graph) finds them here, package faces excepted
(``launcher.x`` importing its own submodule is not a cycle).
"""

from __future__ import annotations

import os
import subprocess
import sys

import grimp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_import_contract_is_kept():
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    p = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]


def strongly_connected(graph, modules) -> list[list[str]]:
    """Tarjan's algorithm over the direct imports between MODULES: the groups of two or more
    modules that reach each other."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v) & modules):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


def test_strongly_connected_finds_a_planted_cycle():
    class Graph:  # a -> b -> c -> a, d -> a
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert strongly_connected(Graph(), {"a", "b", "c", "d"}) == [["a", "b", "c"]]


def test_no_import_cycle():
    graph = grimp.build_graph("launcher", "launcher_backends", cache_dir=None)
    packages = {m for m in graph.modules if graph.find_children(m)}
    # a package's face (its __init__) may import its own submodules; that is no cycle
    modules = set(graph.modules) - packages
    assert strongly_connected(graph, modules) == []
