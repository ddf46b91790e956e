"""A table of an agent's networks: parameters and size, printed and saved when a run starts."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class ModuleRow:
    """One network of an agent.

    Attributes:
        name: The attribute name (``q_network``).
        type: The module's class name.
        params: Parameters in the module.
        trainable: Parameters with ``requires_grad`` (a target network has none).
        size_bytes: Bytes of its parameters and buffers.
    """

    name: str
    type: str
    params: int
    trainable: int
    size_bytes: int


def summarize(model: nn.Module) -> list[ModuleRow]:
    """A row per direct child module of ``model`` (an agent's networks), in definition order."""
    rows = []
    for name, module in model.named_children():
        params = list(module.parameters())
        rows.append(ModuleRow(
            name=name, type=type(module).__name__,
            params=sum(p.numel() for p in params),
            trainable=sum(p.numel() for p in params if p.requires_grad),
            size_bytes=sum(t.numel() * t.element_size()
                           for t in [*params, *module.buffers()])))
    return rows


def format_summary(rows: list[ModuleRow]) -> str:
    """``rows`` as an aligned text table with a total line."""
    header = ("Name", "Type", "Params", "Trainable", "Size (MB)")
    body = [(r.name, r.type, f"{r.params:,}", f"{r.trainable:,}", f"{r.size_bytes / 1e6:.3f}")
            for r in rows]
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    total = sum(r.params for r in rows)
    trainable = sum(r.trainable for r in rows)
    size = sum(r.size_bytes for r in rows) / 1e6
    lines.append(f"Total: {total:,} parameters ({trainable:,} trainable), {size:.3f} MB")
    return "\n".join(lines)
