"""What the running torch, transformers and diffusers can do: one table, probed once.

Why a module: compilebench claims a range of torch releases (pyproject), and several
features it uses appeared, changed default or changed signature inside that range
(`aot_compile` is off by default in torch 2.11 and on from 2.12). Checks scattered through
the code drift; here each feature is probed once, by feature detection (attributes,
signatures, config keys; never version arithmetic), and every user of a feature asks this
module:

- `require("aot_compile")` raises `FeatureMissing`, which the worker and the lifecycle turn
  into status `skipped` with the reason ("aot_compile needs torch >= 2.11; this is 2.10.0"),
  never a failure, crash or hang;
- `missing_reason(...)` returns that reason (or None) where a caller plans rather than runs;
- `enable(name)` switches on a feature that this release has behind a flag;
- `capabilities_summary()` is what goes into the run environment and the report.

The `needs` texts name the first release known to have the feature: for torch >= 2.11 they
were read off the 2.11.0, 2.12.1, 2.13.0 and 2.14.1 wheels; older ones come from the PyTorch
release notes and are outside the tested range (pyproject's lower bound).

Cost: probing everything needs `torch._dynamo` and `torch._inductor` imported (workers
import them anyway) and imports two transformers/diffusers modules; benchmarks/capability_probe.py
measures it (docs/COMPILERS.md quotes the figure).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler import NotApplicableError


class FeatureMissing(NotApplicableError):
    """A feature this case or row needs is not in the installed torch / transformers /
    diffusers: the case is skipped with this message, never failed."""


@dataclass(frozen=True)
class Capability:
    """One probed feature. `detail` says how it is reached (or what is missing)."""

    name: str
    package: str
    available: bool
    needs: str
    detail: str
    used_for: str

    def reason(self) -> str:
        """The skip reason for a case that needs this feature."""
        return f"{self.name} needs {self.needs}; this is {self.package} {package_version(self.package) or 'not installed'}" \
               + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Unknown:
    """The source cannot decide (a star import, a module-level __getattr__, an inherited
    attribute): ask the imported module instead."""


UNKNOWN: Any = _Unknown()
MISSING: Any = object()


class LiveReader:
    """Answers from the imported modules (exact; imports them)."""

    def has(self, module: str, attr: str) -> bool:
        try:
            return hasattr(importlib.import_module(module), attr)
        except ImportError:
            return False

    def value(self, module: str, attr: str) -> Any:
        return getattr(importlib.import_module(module), attr, MISSING)

    def class_fields(self, module: str, cls: str) -> list[str] | None:
        klass = getattr(importlib.import_module(module), cls, None)
        return [f.name for f in dataclasses.fields(klass)] if dataclasses.is_dataclass(klass) else None

    def init_params(self, module: str, cls: str) -> list[tuple[str, bool]] | None:
        """(name, required) of `cls.__init__`'s named parameters, self excluded."""
        klass = getattr(importlib.import_module(module), cls, None)
        if klass is None:
            return None
        params = inspect.signature(klass.__init__).parameters.values()
        return [(p.name, p.default is inspect.Parameter.empty) for p in params
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def class_value(self, module: str, cls: str, attr: str) -> Any:
        klass = getattr(importlib.import_module(module), cls, None)
        return MISSING if klass is None else getattr(klass, attr, MISSING)

    def init_sets(self, module: str, cls: str, attr: str) -> bool:
        klass = getattr(importlib.import_module(module), cls, None)
        return klass is not None and hasattr(klass(), attr)


class SourceReader:
    """Answers from the installed source files, without importing them: the imports behind
    the probes (torch._dynamo, transformers' cache classes, the diffusers UNet) cost seconds
    of CPU, which a run's parent would pay for nothing. Returns UNKNOWN where the source
    cannot decide. tests/test_capabilities.py checks it agrees with LiveReader."""

    @functools.cache  # noqa: B019 - one reader per process, files do not change under it
    def _tree(self, module: str) -> ast.Module | None:
        path = _module_file(module)
        if path is None:
            return None
        try:
            return ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            return None

    def _top_level(self, module: str) -> tuple[dict[str, ast.AST], bool] | None:
        """Top-level names of `module` (runtime ones: `if TYPE_CHECKING:` blocks skipped) and
        whether they are complete (no star import, no module __getattr__)."""
        tree = self._tree(module)
        if tree is None:
            return None
        names: dict[str, ast.AST] = {}
        complete = True
        for node in _runtime_statements(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        names[target.id] = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names[node.target.id] = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        complete = False
                    else:
                        names[alias.asname or alias.name.split(".")[0]] = node
        if "__getattr__" in names:
            complete = False
        return names, complete

    def has(self, module: str, attr: str) -> Any:
        top = self._top_level(module)
        if top is None:
            return UNKNOWN
        names, complete = top
        return True if attr in names else (False if complete else UNKNOWN)

    def value(self, module: str, attr: str) -> Any:
        top = self._top_level(module)
        node = top[0].get(attr) if top else None
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return UNKNOWN
        return UNKNOWN

    def _class(self, module: str, cls: str) -> ast.ClassDef | None:
        top = self._top_level(module)
        node = top[0].get(cls) if top else None
        return node if isinstance(node, ast.ClassDef) else None

    def class_fields(self, module: str, cls: str) -> Any:
        node = self._class(module, cls)
        if node is None or node.bases:
            return UNKNOWN  # inherited fields: only the import knows them
        return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                and "ClassVar" not in ast.unparse(s.annotation)]

    def _init(self, module: str, cls: str) -> ast.FunctionDef | None:
        node = self._class(module, cls)
        return next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None) if node else None

    def init_params(self, module: str, cls: str) -> Any:
        init = self._init(module, cls)
        if init is None:
            return UNKNOWN
        a = init.args
        positional = a.posonlyargs + a.args
        n_required = len(positional) - len(a.defaults)
        params = [(arg.arg, i < n_required) for i, arg in enumerate(positional)]
        params += [(arg.arg, default is None) for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
        return [p for p in params if p[0] != "self"]

    def class_value(self, module: str, cls: str, attr: str) -> Any:
        node = self._class(module, cls)
        if node is None:
            return UNKNOWN
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == attr for t in targets) and stmt.value is not None:
                try:
                    return ast.literal_eval(stmt.value)
                except ValueError:
                    return UNKNOWN
        return UNKNOWN  # maybe inherited

    def init_sets(self, module: str, cls: str, attr: str) -> Any:
        init = self._init(module, cls)
        if init is None:
            return UNKNOWN
        for node in ast.walk(init):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) and t.value.id == "self"
                   for t in targets):
                return True
        return UNKNOWN


def _runtime_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Top-level statements, descending into try/if blocks except `if TYPE_CHECKING:`."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" in ast.unparse(node.test):
                out.extend(_runtime_statements(node.orelse))
            else:
                out.extend(_runtime_statements(node.body) + _runtime_statements(node.orelse))
        elif isinstance(node, ast.Try):
            out.extend(_runtime_statements(node.body))
            for handler in node.handlers:
                out.extend(_runtime_statements(handler.body))
        else:
            out.append(node)
    return out


def _module_file(module: str) -> Path | None:
    """The .py file of `module`, found without importing it (only its top package's spec)."""
    top, *rest = module.split(".")
    if module in sys.modules:
        origin = getattr(sys.modules[module], "__file__", None)
        return Path(origin) if origin else None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for location in spec.submodule_search_locations or []:
        base = Path(location).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


class Inspector:
    """What the probes ask. mode "auto": an imported module answers live (exact, free),
    any other from its source, falling back to importing it where the source cannot decide;
    "live" / "source" force one reader (tests compare the two)."""

    def __init__(self, mode: str = "auto") -> None:
        self.mode = mode
        self.live = LiveReader()
        self.source = SourceReader()

    def _ask(self, method: str, module: str, *args: str) -> Any:
        if self.mode != "live" and (self.mode == "source" or module not in sys.modules):
            answer = getattr(self.source, method)(module, *args)
            if answer is not UNKNOWN:
                return answer
        return getattr(self.live, method)(module, *args)

    def has(self, module: str, *attrs: str) -> tuple[bool, str]:
        """(all present, what is missing) for attributes of `module`."""
        missing = [a for a in attrs if not self._ask("has", module, a)]
        return (not missing), (f"no {', '.join(f'{module}.{a}' for a in missing)}" if missing else "")

    def value(self, module: str, attr: str) -> Any:
        return self._ask("value", module, attr)

    def class_fields(self, module: str, cls: str) -> list[str] | None:
        return self._ask("class_fields", module, cls)

    def init_params(self, module: str, cls: str) -> list[tuple[str, bool]] | None:
        return self._ask("init_params", module, cls)

    def class_value(self, module: str, cls: str, attr: str) -> Any:
        return self._ask("class_value", module, cls, attr)

    def init_sets(self, module: str, cls: str, attr: str) -> bool:
        return bool(self._ask("init_sets", module, cls, attr))


Probe = Callable[[Inspector], tuple[bool, str]]


@dataclass(frozen=True)
class Feature:
    name: str
    package: str
    needs: str
    used_for: str
    probe: Probe


# the fields harness.measure.compile_metrics reads from each CompilationMetrics entry
COMPILE_METRICS_FIELDS = (
    "dynamo_cumulative_compile_time_us", "aot_autograd_cumulative_compile_time_us",
    "inductor_cumulative_compile_time_us", "inductor_code_gen_cumulative_compile_time_us",
    "inductor_fx_local_cache_hit_count", "inductor_fx_local_cache_miss_count",
    "aotautograd_local_cache_hit_count", "aotautograd_local_cache_miss_count",
)


def _probe_aot_compile(ins: Inspector) -> tuple[bool, str]:
    # the entry points the lifecycle rows call: `fn.aot_compile(...)` is a closure that
    # delegates to aot_compile_fullgraph, which returns an AOTCompiledFunction (its
    # save_compiled_function writes the artifact); load_compiled_function reads it back.
    # Mega-Cache (save_cache_artifacts) is another feature with its own probe: not needed here.
    ok, detail = ins.has("torch.compiler", "load_compiled_function")
    if ok:
        ok, detail = ins.has("torch._dynamo.aot_compile", "aot_compile_fullgraph", "AOTCompiledFunction")
    if not ok:
        return ok, detail
    default = ins.value("torch._dynamo.config", "enable_aot_compile")
    if default is MISSING or default is UNKNOWN:
        return False, "no torch._dynamo.config.enable_aot_compile"
    if default:
        return True, "on by default"
    return True, "off by default in this release: the harness sets torch._dynamo.config.enable_aot_compile = True"


def _probe_aoti(ins: Inspector) -> tuple[bool, str]:
    ok, detail = ins.has("torch._inductor", "aoti_compile_and_package", "aoti_load_package")
    return (ok, detail) if not ok else ins.has("torch.export", "export")


def _probe_recompile_limit(ins: Inspector) -> tuple[bool, str]:
    if ins.has("torch._dynamo.config", "recompile_limit")[0]:
        return True, "torch._dynamo.config.recompile_limit"
    if ins.has("torch._dynamo.config", "cache_size_limit")[0]:
        return True, "torch._dynamo.config.cache_size_limit (the older name)"
    return False, "neither torch._dynamo.config.recompile_limit nor cache_size_limit"


def _probe_compile_metrics(ins: Inspector) -> tuple[bool, str]:
    ok, detail = ins.has("torch._dynamo.utils", "get_compilation_metrics", "CompilationMetrics")
    if not ok:
        return ok, detail
    fields = ins.class_fields("torch._dynamo.utils", "CompilationMetrics") or []
    missing = [f for f in COMPILE_METRICS_FIELDS if f not in fields]
    if missing:
        return False, f"CompilationMetrics lacks {', '.join(missing)}: the stage breakdown and cache hits would read 0"
    return True, f"the {len(COMPILE_METRICS_FIELDS)} fields read are all present"


def _probe_compile_logs(ins: Inspector) -> tuple[bool, str]:
    import torch._logging  # imported by torch itself

    params = inspect.signature(torch._logging.set_logs).parameters
    missing = [p for p in ("graph_breaks", "recompiles") if p not in params]
    return (not missing), (f"torch._logging.set_logs takes no {', '.join(missing)}" if missing else "")


def _probe_module_compile(ins: Inspector) -> tuple[bool, str]:
    import torch  # torch.nn is imported with torch

    ok = hasattr(torch.nn.Module, "compile")
    return ok, "" if ok else "no torch.nn.Module.compile"


def _probe_static_cache(ins: Inspector) -> tuple[bool, str]:
    params = ins.init_params("transformers.cache_utils", "StaticCache")
    if params is None:
        return False, "no transformers.cache_utils.StaticCache"
    names = [n for n, _ in params]
    if "config" not in names or "max_cache_len" not in names:
        return False, f"StaticCache({', '.join(names)}) takes no config= / max_cache_len="
    required = [n for n, req in params if req and n not in ("config", "max_cache_len")]
    if required:
        return False, f"StaticCache also requires {', '.join(required)}"
    return True, "StaticCache(config=, max_cache_len=)"


def _probe_generation_compile_config(ins: Inspector) -> tuple[bool, str]:
    ok, detail = ins.has("transformers.generation.configuration_utils", "CompileConfig", "GenerationConfig")
    if not ok:
        return ok, detail
    if not ins.init_sets("transformers.generation.configuration_utils", "GenerationConfig", "disable_compile"):
        return False, "GenerationConfig has no disable_compile (the eager generate baseline would compile)"
    return True, ""


def _probe_diffusers_repeated_blocks(ins: Inspector) -> tuple[bool, str]:
    blocks = ins.class_value("diffusers.models.unets.unet_2d_condition", "UNet2DConditionModel", "_repeated_blocks")
    if blocks is MISSING or not blocks:
        return False, "UNet2DConditionModel declares no _repeated_blocks: regional compilation falls back to _no_split_modules"
    return True, f"UNet2DConditionModel._repeated_blocks = {list(blocks)}"


FEATURES: tuple[Feature, ...] = (
    Feature("torch.compile", "torch", "torch >= 2.0", "every compiled case", lambda ins: ins.has("torch", "compile")),
    Feature("module_compile", "torch", "torch >= 2.2", "in-place and regional compiler configs (nn.Module.compile)",
            _probe_module_compile),
    Feature("set_stance", "torch", "torch >= 2.6", "eager baselines of diffusion cases (torch.compiler.set_stance)",
            lambda ins: ins.has("torch.compiler", "set_stance")),
    Feature("cudagraph_mark_step_begin", "torch", "torch >= 2.1",
            "decode/denoise loops under reduce-overhead on CUDA",
            lambda ins: ins.has("torch.compiler", "cudagraph_mark_step_begin")),
    Feature("nested_compile_region", "torch", "torch >= 2.8", "reported only (regional compilation uses nn.Module.compile)",
            lambda ins: ins.has("torch.compiler", "nested_compile_region")),
    Feature("mega_cache", "torch", "torch >= 2.7", "cold-start row mega_cache (torch.compiler.save/load_cache_artifacts)",
            lambda ins: ins.has("torch.compiler", "save_cache_artifacts", "load_cache_artifacts")),
    Feature("aot_compile", "torch", "torch >= 2.11 (on by default from 2.12)",
            "cold-start rows aot_compile, aot_compile_warm (fn.aot_compile + torch.compiler.load_compiled_function)",
            _probe_aot_compile),
    Feature("aoti", "torch", "torch >= 2.6", "cold-start row aoti (torch.export + aoti_compile_and_package / aoti_load_package)",
            _probe_aoti),
    Feature("recompile_limit", "torch", "torch >= 2.7 (cache_size_limit before)", "shape sweep --recompile-limit",
            _probe_recompile_limit),
    Feature("compile_metrics", "torch", "torch >= 2.6", "compile-time breakdown and cache hits per case",
            _probe_compile_metrics),
    Feature("compile_logs", "torch", "torch >= 2.2", "graph-break and recompile reasons (torch._logging artifacts)",
            _probe_compile_logs),
    Feature("mark_static_address", "torch", "torch >= 2.2", "LLM decode loop under CUDA graphs",
            lambda ins: ins.has("torch._dynamo", "mark_static_address")),
    Feature("list_mode_options", "torch", "torch >= 2.0", "configs that combine a mode with options",
            lambda ins: ins.has("torch._inductor", "list_mode_options")),
    Feature("cpu_vec_isa", "torch", "torch >= 2.4", "CPU ISA probe before the clock starts",
            lambda ins: ins.has("torch._inductor.cpu_vec_isa", "pick_vec_isa")),
    Feature("static_cache", "transformers", "a transformers whose StaticCache takes (config=, max_cache_len=) alone",
            "LLM decode and generate scenarios", _probe_static_cache),
    Feature("generation_compile_config", "transformers", "transformers >= 4.52 (CompileConfig, disable_compile)",
            "LLM generate scenario", _probe_generation_compile_config),
    Feature("diffusers_repeated_blocks", "diffusers", "diffusers >= 0.35", "regional compilation of the SDXL UNet",
            _probe_diffusers_repeated_blocks),
)
FEATURES_BY_NAME = {f.name: f for f in FEATURES}


@functools.cache
def package_version(package: str) -> str | None:
    """Installed version, from the module when imported (a source build's metadata can lag)."""
    module = importlib.import_module(package) if package == "torch" else None
    if module is not None:
        return str(module.__version__)
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe(feature: Feature, inspector: Inspector) -> Capability:
    """Run one feature's probe; a probe that raises means "not usable here", with why."""
    if feature.package != "torch" and package_version(feature.package) is None:
        return Capability(feature.name, feature.package, False, feature.needs, f"{feature.package} is not installed",
                          feature.used_for)
    try:
        available, detail = feature.probe(inspector)
    except Exception as exc:  # noqa: BLE001 - a broken probe is an answer too
        available, detail = False, f"probe raised {type(exc).__name__}: {str(exc)[:200]}"
    return Capability(feature.name, feature.package, bool(available), feature.needs, detail, feature.used_for)


_INSPECTOR = Inspector()


@functools.cache
def capability(name: str) -> Capability:
    """One feature, probed on first use in this process."""
    try:
        feature = FEATURES_BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown capability {name!r}; known: {', '.join(FEATURES_BY_NAME)}") from None
    return probe(feature, _INSPECTOR)


def capabilities() -> dict[str, Capability]:
    """Every feature, probed (once per process)."""
    return {f.name: capability(f.name) for f in FEATURES}


def missing_reason(*names: str) -> str | None:
    """The skip reason for the first of `names` that is not available, or None."""
    for name in names:
        cap = capability(name)
        if not cap.available:
            return cap.reason()
    return None


def require(*names: str) -> None:
    """Raise `FeatureMissing` (the case is skipped) unless every feature is available."""
    reason = missing_reason(*names)
    if reason:
        raise FeatureMissing(reason)


def enable(name: str) -> None:
    """Require `name` and switch it on where this release has it behind a flag."""
    require(name)
    if name == "aot_compile":
        import torch._dynamo.config as dynamo_config

        dynamo_config.enable_aot_compile = True


def _recompile_limit_name() -> str:
    import torch._dynamo.config as dynamo_config

    require("recompile_limit")
    return "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"


def set_recompile_limit(limit: int) -> None:
    """Set Dynamo's recompile limit under whichever name this torch uses."""
    import torch._dynamo.config as dynamo_config

    setattr(dynamo_config, _recompile_limit_name(), int(limit))


def recompile_limit() -> int:
    """Dynamo's recompile limit in force, under whichever name this torch uses."""
    import torch._dynamo.config as dynamo_config

    return int(getattr(dynamo_config, _recompile_limit_name()))


def capabilities_summary() -> dict[str, Any]:
    """For the run environment: versions probed and, per feature, available + detail."""
    caps = capabilities()
    return {
        "versions": {p: package_version(p) for p in ("torch", "transformers", "diffusers")},
        "features": {name: {"available": c.available, "needs": c.needs, "detail": c.detail, "used_for": c.used_for}
                     for name, c in caps.items()},
        "missing": sorted(name for name, c in caps.items() if not c.available),
    }
