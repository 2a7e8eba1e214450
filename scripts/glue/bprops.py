"""``ms_grad_ops/_bprop_table.py``: the bprop of every op, wired from the forward/grad pairing of the
table (``DERIVATIVES``, ``no_gradient_reason``).

MindSpore's GRAPH mode parses a bprop's source (``inspect.getsource``) and takes no ``*args``, so
each bprop is a real ``def`` in a real file with its op's exact parameter list: the op's inputs by
name, then ``out`` and ``dout``.
"""
from __future__ import annotations

import json
import textwrap
from types import ModuleType

from .common import banner, wrap_call

PATH = "ms_grad_ops/_bprop_table.py"
WIDTH = 120

HEADER = '''"""The bprop of every op: generated from the forward/grad pairing of ``ms_grad_ops/_specs.py``
(``DERIVATIVES``: the grad op, the source of each of its inputs, the gradient of each forward input;
``no_gradient_reason`` for the others) by ``scripts/glue/bprops.py``.

A differentiable forward op's ``make_<op>_bprop(grad)`` takes the primitive of its grad op (built by
``_custom``, with the attributes of ``_bprops.grad_op``) and returns a bprop calling it once: one
gradient per input, zeros for indices, lengths and tables (every input is a tensor, so the structure
is fixed). Every other op's ``<op>_bprop`` raises a RuntimeError saying why it has no gradient
(instead of MindSpore's "Illegal primitive Custom's bprop not defined").

Each bprop is a real ``def`` with the op's exact parameter list (its inputs, then out, dout): GRAPH
mode parses a bprop's source and takes no ``*args``.
"""
from __future__ import annotations

from collections.abc import Callable

from mindspore import Tensor
from mindspore import ops as msops
'''


def _call(head: str, args: list[str], tail: str, indent: int) -> list[str]:
    """``head(arg, arg, ...)tail`` at ``indent``, continuation lines under the first argument."""
    first = " " * indent + head + "("
    return wrap_call(first, args, ")" + tail, " " * len(first), WIDTH)


def _param(name: str) -> str:
    """A bprop parameter for input ``name``: an input called out or dout would shadow the bprop's own."""
    return f"{name}_" if name in ("out", "dout") else name


def _params(op: object) -> list[str]:
    out_type = "tuple" if len(op.outputs) > 1 else "Tensor"
    return [f"{_param(n)}: Tensor" for n in op.inputs] + [f"out: {out_type}", f"dout: {out_type}"]


def _source(source: str, forward: object) -> str:
    """The bprop expression of a grad input's source."""
    kind, _, name = source.rpartition(".")
    if not kind:
        return _param(name)
    holder = "out" if kind == "result" else "dout"
    return f"{holder}[{forward.outputs.index(name)}]" if len(forward.outputs) > 1 else holder


def _docstring(text: str, indent: int) -> list[str]:
    pad = " " * indent
    wrapped = textwrap.wrap(text, width=WIDTH - indent - 6)
    if len(wrapped) == 1:
        return [f'{pad}"""{wrapped[0]}"""']
    return [f'{pad}"""{wrapped[0]}'] + [pad + w for w in wrapped[1:]] + [f'{pad}"""']


def _string(text: str, head: str, tail: str, indent: int) -> list[str]:
    """``head("text")tail``, the string split into adjacent literals to fit WIDTH."""
    first = " " * indent + head + "("
    chunks = textwrap.wrap(text, width=WIDTH - len(first) - 4, drop_whitespace=False)
    lines = [" " * len(first) + json.dumps(c) for c in chunks]
    lines[0] = first + lines[0].lstrip()
    lines[-1] += ")" + tail
    return lines


def _differentiable(d: object, specs: ModuleType) -> list[str]:
    fwd, grad = specs.OP_SPECS[d.forward], specs.OP_SPECS[d.grad]
    clash = ({_param(n) for n in fwd.inputs} | {"out", "dout", "msops", "Tensor"}) & (set(grad.outputs) | {d.grad})
    if clash:
        raise ValueError(f"{d.forward}: the name(s) {sorted(clash)} would be bound twice in the bprop")
    many = len(fwd.outputs) > 1
    unused = [f"dout[{i}] ({o})" if many else f"dout ({o})" for i, o in enumerate(fwd.outputs)
              if f"grad.{o}" not in d.inputs]
    doc = f"The bprop of {d.forward}: one {d.grad} call." + (f" {d.note}" if d.note else "")
    if unused:
        doc += f" Unused incoming gradients: {', '.join(unused)}."
    grads = [d.gradients.get(n, f"msops.zeros_like({_param(n)})") for n in fwd.inputs]
    lines = [f"def make_{d.forward}_bprop({d.grad}: Callable[..., tuple]) -> Callable[..., tuple]:"]
    lines += _docstring(doc, 4) + [""]
    lines += _call(f"def {d.forward}_bprop", _params(fwd), " -> tuple[Tensor, ...]:", 4)
    call = f"        {', '.join(grad.outputs)} = {d.grad}("  # the grad outputs, named as in the table
    sources = [_source(s, fwd) for s in d.inputs]
    one_line = call + ", ".join(sources) + ")"
    lines += [one_line] if len(one_line) <= WIDTH else [call] + wrap_call(" " * 12, sources, ")", " " * 12, WIDTH)
    one_line = "        return " + ", ".join(grads) + ("," if len(grads) == 1 else "")  # a bprop returns a tuple
    lines += [one_line] if len(one_line) <= WIDTH else wrap_call(" " * 8 + "return (", grads, ")", " " * 16, WIDTH)
    lines += ["", f"    return {d.forward}_bprop"]
    return lines


def _no_gradient(name: str, reason: str, specs: ModuleType) -> list[str]:
    op = specs.OP_SPECS[name]
    lines = _call(f"def {name}_bprop", _params(op), " -> tuple[Tensor, ...]:", 0)
    return lines + _string(f"{name} has no gradient: {reason}", "raise RuntimeError", "", 4)


def generate(specs: ModuleType) -> dict[str, str]:
    lines = [banner("#").rstrip("\n"), *HEADER.splitlines()]
    for d in specs.DERIVATIVES.values():
        lines += ["", ""] + _differentiable(d, specs)
    others = [n for n in specs.OP_SPECS if n not in specs.DERIVATIVES]
    for name in others:
        lines += ["", ""] + _no_gradient(name, specs.no_gradient_reason(name), specs)
    lines += ["", ""]
    lines.append("# The bprop factory of each differentiable forward op, by op name.")
    lines.append("BPROP_FACTORIES: dict[str, Callable[[Callable[..., tuple]], Callable[..., tuple]]] = {")
    lines += [f'    "{n}": make_{n}_bprop,' for n in specs.DERIVATIVES]
    lines.append("}")
    lines.append("")
    lines.append("# The bprop of every other op: it raises, saying why the op has no gradient.")
    lines.append("NO_GRADIENT_BPROPS: dict[str, Callable[..., tuple]] = {")
    lines += [f'    "{n}": {n}_bprop,' for n in others]
    lines.append("}")
    return {PATH: "\n".join(lines) + "\n"}
