"""What a template reads on every render: the data a notify must carry for it.

Templates render with ``StrictUndefined``, so a variable missing from an intent's data
fails its send. ``always_read`` finds the variables whose absence fails *every*
render of a file, whatever the rest of the data says, so ``notify``, the publish route
and the campaign check can refuse them at once (``TemplateSet.unprovided``). The rule
is deliberately the safe half of "is this variable needed": a variable is counted only
where the render evaluates it unconditionally, in a place where an undefined value
raises:

- printed (``{{ x }}``), tested by an ``if`` or a conditional expression, looped over
  (``{% for i in x %}``), compared, computed with, called, or read into
  (``x.name``, ``x[0]``), or handed to a filter other than ``default``/``d``/``pprint``;
- and not inside a branch that may not run: the body of an ``if`` (and its ``elif`` and
  ``else``), a loop's body, a macro, a ``call`` block's body, the right side of ``and``
  and ``or``, either outcome of ``a if b else c``.

So ``{% if x is defined %}{{ x }}{% endif %}``, ``x | default("")``,
``x is defined and x > 3``, ``{% if kind == "a" %}{{ a_only }}{% endif %}`` and a
variable passed on as a value (``{% set y = x %}``, a filter's or a call's argument)
are never refused; a variable needed only in such places is found, as before, when a
send renders it. Names the template binds itself (``set``, ``with``, loop targets,
macros) and names Jinja's own analysis does not report as coming from the context
(``jinja2.meta.find_undeclared_variables``) are never counted either.
"""

from __future__ import annotations

from collections.abc import Iterable

from jinja2 import meta, nodes

#: Filters that take an undefined value without raising: ``default`` is the guard,
#: ``pprint`` prints its repr.
_LENIENT_FILTERS = frozenset({"default", "d", "pprint"})


def always_read(tree: nodes.Template) -> frozenset[str]:
    """The context variables every render of ``tree`` fails without (see the module)."""
    reads: set[str] = set()
    _statements(tree.body, set(), reads)
    return frozenset(reads & meta.find_undeclared_variables(tree))


def _statements(body: Iterable[nodes.Node], bound: set[str], reads: set[str]) -> None:
    """Visit statements that run one after another in one scope (``bound`` grows with
    what they assign, for the statements after them)."""
    for node in body:
        _statement(node, bound, reads)


def _statement(node: nodes.Node, bound: set[str], reads: set[str]) -> None:
    if isinstance(node, nodes.Output):
        for child in node.nodes:
            _expr(child, bound, reads, strict=True)
    elif isinstance(node, nodes.If):
        _expr(node.test, bound, reads, strict=True)  # its branches may not run
    elif isinstance(node, nodes.For):
        _expr(node.iter, bound, reads, strict=True)  # its body may run no time
    elif isinstance(node, nodes.Assign):
        _expr(node.node, bound, reads, strict=False)
        bound.update(_stored(node.target))
    elif isinstance(node, nodes.AssignBlock):
        _statements(node.body, set(bound), reads)
        bound.update(_stored(node.target))
    elif isinstance(node, nodes.With):
        for value in node.values:
            _expr(value, bound, reads, strict=False)
        inner = set(bound)
        for target in node.targets:
            inner.update(_stored(target))
        _statements(node.body, inner, reads)
    elif isinstance(node, nodes.FilterBlock):
        _filter_arguments(node.filter, bound, reads)
        _statements(node.body, set(bound), reads)
    elif isinstance(node, nodes.Block | nodes.Scope | nodes.ScopedEvalContextModifier):
        _statements(node.body, set(bound), reads)
    elif isinstance(node, nodes.Macro):
        bound.add(node.name)  # its body runs only when called
    elif isinstance(node, nodes.CallBlock):
        _expr(node.call, bound, reads, strict=True)  # its body runs only if the macro asks
    elif isinstance(node, nodes.ExprStmt):
        _expr(node.node, bound, reads, strict=False)
    # Anything else (include and its kin are refused when compiled, break, continue)
    # reads nothing on every render.


def _expr(node: nodes.Node | None, bound: set[str], reads: set[str], *, strict: bool) -> None:
    """Visit an expression that is evaluated; ``strict``: its value being undefined
    raises here (else it is only passed on)."""
    if node is None:
        return
    if isinstance(node, nodes.Name):
        if strict and node.ctx == "load" and node.name not in bound:
            reads.add(node.name)
    elif isinstance(node, nodes.Getattr):
        _expr(node.node, bound, reads, strict=True)
    elif isinstance(node, nodes.Getitem):
        _expr(node.node, bound, reads, strict=True)
        _expr(node.arg, bound, reads, strict=False)
    elif isinstance(node, nodes.Filter):
        _expr(node.node, bound, reads, strict=node.name not in _LENIENT_FILTERS)
        _filter_arguments(node, bound, reads)
    elif isinstance(node, nodes.Test):
        _expr(node.node, bound, reads, strict=False)  # `is defined`, `is none`: no raise
        _filter_arguments(node, bound, reads)
    elif isinstance(node, nodes.Call):
        _expr(node.node, bound, reads, strict=True)
        _filter_arguments(node, bound, reads)
    elif isinstance(node, nodes.CondExpr):
        _expr(node.test, bound, reads, strict=True)  # one of the two outcomes runs
    elif isinstance(node, nodes.And | nodes.Or):
        _expr(node.left, bound, reads, strict=True)  # the right side may not run
    elif isinstance(node, nodes.BinExpr):
        _expr(node.left, bound, reads, strict=True)
        _expr(node.right, bound, reads, strict=True)
    elif isinstance(node, nodes.UnaryExpr):
        _expr(node.node, bound, reads, strict=True)
    elif isinstance(node, nodes.Compare):
        membership = all(op.op in ("in", "notin") for op in node.ops)
        # `x in []` compares x with nothing: only the container must exist.
        _expr(node.expr, bound, reads, strict=not membership)
        for operand in node.ops:
            _expr(operand.expr, bound, reads, strict=True)
    elif isinstance(node, nodes.Concat):
        for child in node.nodes:
            _expr(child, bound, reads, strict=True)
    elif isinstance(node, nodes.MarkSafe | nodes.MarkSafeIfAutoescape):
        _expr(node.expr, bound, reads, strict=strict)
    elif isinstance(node, nodes.List | nodes.Tuple):
        for item in node.items:
            _expr(item, bound, reads, strict=False)
    elif isinstance(node, nodes.Dict):
        for pair in node.items:
            _expr(pair.key, bound, reads, strict=False)
            _expr(pair.value, bound, reads, strict=False)
    elif isinstance(node, nodes.Slice):
        for part in (node.start, node.stop, node.step):
            _expr(part, bound, reads, strict=False)


def _filter_arguments(node: nodes.Filter | nodes.Test | nodes.Call, bound: set[str],
                      reads: set[str]) -> None:
    """A filter's, test's or call's arguments: evaluated, then passed on."""
    for arg in node.args:
        _expr(arg, bound, reads, strict=False)
    for keyword in node.kwargs:
        _expr(keyword.value, bound, reads, strict=False)
    _expr(node.dyn_args, bound, reads, strict=False)
    _expr(node.dyn_kwargs, bound, reads, strict=False)


def _stored(target: nodes.Node) -> set[str]:
    """The names an assignment target binds (``a``, ``a, b``)."""
    if isinstance(target, nodes.Name):
        return {target.name}
    if isinstance(target, nodes.Tuple | nodes.List):
        return {name for item in target.items for name in _stored(item)}
    return set()  # a namespace attribute (ns.x) binds no name
