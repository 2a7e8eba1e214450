"""The generated blocks of each ``docs/ops/<op>.md`` page, from the table:

- ``signature``: the functional op's signature (``OpSpec.signature``, the one the tests hold the code to);
- ``attributes``: every attribute's domain, default (or "required"), backend limits and meaning,
  the sizes a backend's kernel bounds, the one wording of a domain error, and, for an op without
  Ascend dtypes, that it has no Ascend kernel yet.

The rest of a page is hand-written; each block sits between its two markers and is rewritten in
place (a page without them is an error: add them where the block belongs)."""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

from .common import banner, wrap_call

WIDTH = 110


def markers(block: str) -> tuple[str, str]:
    return f"<!-- {block}: " + banner("").strip() + " -->", f"<!-- end of the generated {block} -->"


def _literal(v: object) -> str:
    return f'"{v}"' if isinstance(v, str) else str(v)


def _signature(op: object) -> list[str]:
    params, star = [], False
    for p in op.signature().parameters.values():
        if p.kind == p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        params.append(p.name if p.default is p.empty else f"{p.name}={_literal(p.default)}")
    head = f"ms_grad_ops.ops.{op.name}("
    outs = op.outputs[0] if len(op.outputs) == 1 else "(" + ", ".join(op.outputs) + ")"
    lines = wrap_call(head, params, ")", " " * len(head), WIDTH)
    if len(lines[-1]) + len(outs) + 4 <= WIDTH:
        lines[-1] += f" -> {outs}"
    else:
        lines.append(f"    -> {outs}")
    return ["```python", *lines, "```"]


def _value(v: object) -> str:
    return f'`"{v}"`' if isinstance(v, str) else f"`{v}`"


def _attributes(op: object, specs: ModuleType) -> list[str]:
    lines = []
    if op.attrs:
        backends = [b for b in specs.BACKENDS if any(bb == b for a in op.attrs for bb, _ in a.limits)]
        head = ["attribute", "domain", "default", *(f"on {b}" for b in backends), "meaning"]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for a in op.attrs:
            limits = dict(a.limits)
            cells = [f"`{a.name}`", a.domain.text, "required" if a.required else _value(a.default),
                     *(limits[b].text if b in limits else "" for b in backends), a.about]
            lines.append("| " + " | ".join(cells) + " |")
        example = next((a for a in op.attrs if not isinstance(a.domain, specs.Flag)), None)
        if example is not None:
            wording = specs.DOMAIN_ERROR.format(op=op.name, attr="<name>", domain="<domain>", got="<value>")
            lines += ["", f"A value outside its domain (on the backend running it) is a `ValueError` in every layer, "
                          f"in one wording: `{wording}`. Keyword-only in the functional op, in this order."]
    else:
        lines.append("No attributes.")
    sizes = [(b, s) for b, s in op.size_limits]
    if not op.ascend_dtypes:  # no Ascend kernel registered: its Ascend limits are CANN's, for the kernel to come
        lines += ["", "Ascend: **not yet**. No Ascend kernel in this package (the table declares no Ascend dtypes or "
                      "SoCs), so on Ascend the op raises a `RuntimeError` saying so; the Ascend limits here are CANN's "
                      "product limits, the domain an Ascend kernel of this op is to take."]
    if sizes:
        lines += ["", "Sizes the kernels of a backend bound beyond the shape rules (the tiling refuses the others):"
                  if op.ascend_dtypes else "Sizes CANN's Ascend kernels take beyond the shape rules (product limits):"]
        lines += [f"- {s.text(b)}." for b, s in sizes]
    return lines


def page_path(op: object) -> str:
    return f"docs/ops/{op.name}.md"


def _page(root: Path, op: object, specs: ModuleType) -> str:
    path = root / page_path(op)
    text = path.read_text(encoding="utf-8")
    for block, lines in (("signature", _signature(op)), ("attributes", _attributes(op, specs))):
        begin, end = markers(block)
        start, stop = text.find(f"<!-- {block}: "), text.find(end)
        if start < 0 or stop < start:
            raise RuntimeError(f"{page_path(op)}: no {block} block markers ({begin!r} ... {end!r})")
        text = text[:start] + "\n".join([begin, *lines, end]) + text[stop + len(end):]
    return text


def generate(specs: ModuleType) -> dict[str, str]:
    root = Path(specs.__file__).resolve().parent.parent
    return {page_path(op): _page(root, op, specs) for op in specs.OP_SPECS.values()}
