"""Regional compilation: compile each repeated block (transformer layer, UNet block) in
place instead of the whole model. The blocks share code, so Dynamo compiles the first and
reuses it for the others; cold compile time falls roughly by the repeat count.

Which blocks: the model's own declaration when it has one (diffusers `_repeated_blocks`,
transformers/diffusers `_no_split_modules`), else the user-defined class that repeats
most among the children of `nn.ModuleList` / `nn.Sequential` containers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class NotApplicableError(ValueError):
    """The config cannot apply to this model (e.g. regional compilation, no repeated block):
    the case is skipped with this message rather than failed."""


def _declared_block_names(model: Any) -> tuple[list[str], str]:
    for attr in ("_repeated_blocks", "_no_split_modules"):
        names = getattr(model, attr, None)
        if names:
            return [str(n) for n in names], attr
    return [], ""


def _is_builtin(module: Any) -> bool:
    return type(module).__module__.startswith("torch.nn.")


def _repeated_container_class(model: Any) -> str | None:
    """The user-defined class with the most instances inside ModuleList/Sequential
    containers, provided it appears at least twice."""
    import torch.nn as nn

    counts: Counter[str] = Counter()
    for module in model.modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            counts.update(type(child).__name__ for child in module.children() if not _is_builtin(child))
    if not counts:
        return None
    name, n = counts.most_common(1)[0]
    return name if n >= 2 else None


def find_regions(model: Any) -> tuple[list[tuple[str, Any]], str]:
    """(qualified name, module) of each block to compile, outermost matches only (a block
    inside an already selected block is not compiled twice), and where the choice came from."""
    names, source = _declared_block_names(model)
    if not names:
        found = _repeated_container_class(model)
        names, source = ([found], "repeated ModuleList/Sequential children") if found else ([], "")
    wanted = set(names)
    regions: list[tuple[str, Any]] = []
    for qualname, module in model.named_modules():
        if type(module).__name__ not in wanted or module is model:
            continue
        if any(qualname.startswith(prefix + ".") for prefix, _ in regions):
            continue
        regions.append((qualname, module))
    return regions, source


def compile_regions(model: Any, compile_kwargs: dict[str, Any]) -> list[str]:
    """Compile each repeated block in place (`block.compile(**kwargs)`); returns their names."""
    regions, source = find_regions(model)
    if not regions:
        raise NotApplicableError(
            f"regional compilation: {type(model).__name__} has no repeated blocks (no _repeated_blocks / "
            "_no_split_modules and no user-defined class repeated in a ModuleList or Sequential); "
            "use a whole-model compiler such as 'inductor'"
        )
    for _, block in regions:
        block.compile(**compile_kwargs)
    model._compilebench_regions = {"blocks": [q for q, _ in regions], "source": source}
    return [q for q, _ in regions]
