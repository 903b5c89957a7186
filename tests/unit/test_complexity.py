"""No function a reader must fear (issue 34 item 4): no function of McCabe complexity 31 or more
(radon's rank E and F) in ``launcher/`` or ``backends/``, and at most 10 of 21 to 30 (rank D).

The complexity is counted here with the standard library's ``ast``, as radon 6 counts it (no
radon needed): 1, plus for each decision point in the function's own body

- ``if`` / ``elif`` statement and ``x if c else y`` expression: 1;
- ``for`` / ``async for`` / ``while`` loop: 1, and 1 more for its ``else``;
- ``try``: 1 per ``except`` handler, and 1 for its ``else`` (``finally`` adds nothing);
- boolean operator: the number of its operands minus 1 (``a and b or c``: 2);
- comprehension: 1 per ``for`` clause, and 1 per ``if`` clause;
- ``match``: 1 per ``case``, not counting a bare ``case _``;
- ``assert``: 1.

``with`` adds nothing, as in radon. A function nested in another (or a class in it) is not counted in
its outer function's body: it is a function of its own here, measured and ranked alike (radon lists
these closures only with ``--show-closures``). A lambda's body counts in the function it sits in.
Checked against radon 6.0.1 (``radon.complexity.cc_visit``, closures included) on all 2,736 functions
of both trees when this test was written: the same number for every one (today: 6 of rank D, none
of E or F)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("launcher", "backends")
RANK_D = 21  # radon: A 1-5, B 6-10, C 11-20, D 21-30, E 31-40, F 41 and more
RANK_E = 31
MOST_OF_RANK_D = 10
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def decisions(node: ast.AST) -> int:
    """Pure: the decision points NODE itself adds (its children are counted on their own)."""
    if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
        return 1
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):
        wildcard = any(isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None for c in node.cases)
        return max(0, len(node.cases) - wildcard)
    return 0


def complexity(fn: ast.AST) -> int:
    """Pure: McCabe complexity of function FN: 1 + the decision points of its body, without the
    bodies of the functions and classes defined inside it."""
    total, todo = 1, list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
            continue
        total += decisions(node)
        todo.extend(ast.iter_child_nodes(node))
    return total


def functions_of(source: str, name: str) -> list:
    """Pure: [(complexity, "NAME:LINE qualified.name")] of every function in SOURCE, nested ones too."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FUNCTIONS):
                out.append((complexity(child), f"{name}:{child.lineno} {prefix}{child.name}"))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def every_function() -> list:
    return [found for tree in TREES for path in sorted((ROOT / tree).rglob("*.py"))
            for found in functions_of(path.read_text(), path.relative_to(ROOT).as_posix())]


def test_the_count_follows_radons_rules():
    source = '''
def flat(x):
    return x

def branches(xs, a, b):
    if a and b or not xs:          # if 1, boolean operators 2
        pass
    elif a:                        # 1
        pass
    for x in xs:                   # 1, and its else 1
        while x:                   # 1
            x -= 1
    else:
        pass
    try:
        pass
    except ValueError:             # 1
        pass
    except KeyError:               # 1
        pass
    else:                          # 1
        pass
    finally:
        pass
    with open(a) as f:             # nothing
        pass
    assert a                       # 1
    ys = [y for y in xs if y if not y] + [1 if a else 2]   # comprehension 1 + 2 ifs, if-expression 1
    match a:
        case 1: pass               # 1
        case 2: pass               # 1
        case _: pass               # nothing
    f = lambda v: v if v else 0    # 1 (a lambda counts where it is)

    def inner(y):                  # not in branches: a function of its own
        if y:
            return 1
    return inner
'''
    found = dict((name.split(" ")[1], cc) for cc, name in functions_of(source, "m"))
    assert found == {"flat": 1, "branches": 19, "branches.inner": 2}


def test_no_function_of_rank_e_and_at_most_ten_of_rank_d():
    found = every_function()
    assert len(found) > 1000  # the scan saw both trees
    feared = sorted(f"{name} (cc {cc})" for cc, name in found if cc >= RANK_E)
    assert not feared, "rank E or worse (complexity 31 or more): split these\n" + "\n".join(feared)
    rank_d = sorted(f"{name} (cc {cc})" for cc, name in found if cc >= RANK_D)
    assert len(rank_d) <= MOST_OF_RANK_D, (f"{len(rank_d)} functions of rank D (complexity 21-30), at most "
                                           f"{MOST_OF_RANK_D}:\n" + "\n".join(rank_d))
