"""The package layout (issue 19): imports point one way, core <- stages <- cli, and there is no import circle.

Read with `ast` only (nothing is imported), so a broken module still gets a clear report. The layers, bottom up:

    modeling_vaswani/   the models: imports nothing of vaswani or tokenization (it loads through trust_remote_code)
    core                vaswani/{errors,constants,fileio,devices,weights,model_folder}.py, vaswani/metrics/
    tokenization/       the BPE tokenizer: the core only (its `__main__` is a command, in the cli layer)
    stages              vaswani/{data,training,inference,export,convert,hub,serve}/ and vaswani/translate.py (the old
                        home of Translator)
    cli                 vaswani/cli/, tokenization/__main__.py and the train.py script

A module may import from its own layer and the layers below it. First-party imports inside functions are allowed
only where they buy start-up time (the command line's parser must not load torch), each with a comment saying so.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO_ROOT

PACKAGES = ("modeling_vaswani", "tokenization", "vaswani")
CORE = {"vaswani", "vaswani.errors", "vaswani.constants", "vaswani.fileio", "vaswani.devices", "vaswani.weights",
        "vaswani.model_folder"}  # fmt: skip
STAGES = ("data", "training", "inference", "export", "convert", "hub", "serve")
LAYERS = ("modeling", "core", "tokenization", "stages", "cli")
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 900
LONG_MODULES_ALLOWED = {"modeling_vaswani.modeling_vaswani"}  # one modeling file per model: the Hugging Face rule
# Imports inside functions for another reason than start-up time, each with the reason.
INNER_IMPORTS_ALLOWED = {
    ("modeling_vaswani.modeling_vaswani", "modeling_vaswani.pipeline_vaswani"): "only the encoder-decoder's "
    "save_pretrained carries the pipeline file (transformers copies the files a model's module imports)",
}


def layer_of(module: str) -> str:
    """The layer of a first-party module; an unknown place is an error that says where modules belong."""
    parts = module.split(".")
    if parts[0] == "modeling_vaswani":
        return "modeling"
    if parts[0] == "tokenization":
        return "cli" if parts[-1] == "__main__" else "tokenization"
    if module == "train":
        return "cli"
    if module in CORE or module.startswith("vaswani.metrics"):
        return "core"
    if module == "vaswani.translate" or (len(parts) > 1 and parts[1] in STAGES):
        return "stages"
    if len(parts) > 1 and parts[1] == "cli":
        return "cli"
    raise AssertionError(f"{module} is in no layer: put it in the core, a stage subpackage or vaswani/cli/")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_party_modules(root: Path) -> dict[str, Path]:
    modules = {module_name(path, root): path for package in PACKAGES for path in (root / package).rglob("*.py")}
    modules["train"] = root / "train.py"
    return modules


def imports_of(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported first-party module, line, inside a function) of every import statement of `path`. `from X import y`
    counts as importing X.y when X.y is a module, else X."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, inner) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: modeling_vaswani's sibling imports
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.extend((f"{base}.{alias.name}", child.lineno, inner) for alias in child.names)
            visit(child, inner)

    visit(tree, False)
    return [(name, line, inner) for name, line, inner in found if name.split(".")[0] in (*PACKAGES, "train")]


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The first-party module `name` refers to: itself, or the module that defines the name imported from it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path) -> dict[str, list[tuple[str, int, bool]]]:
    modules = first_party_modules(root)
    graph = {}
    for module, path in modules.items():
        edges = []
        for name, line, inner in imports_of(module, path):
            target = resolve(name, modules)
            if target and target != module and not module.startswith(f"{target}."):  # a package's own __init__
                edges.append((target, line, inner))
        graph[module] = edges
    return graph


def upward_imports(graph) -> list[str]:
    return [
        f"{module} ({layer_of(module)}) line {line} imports {target} ({layer_of(target)})"
        for module, edges in graph.items()
        for target, line, _ in edges
        if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(module))
    ]


def circles(graph) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each a circle of imports."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target, _, _ in graph.get(node, []):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


@pytest.fixture(scope="module")
def graph():
    return import_graph(REPO_ROOT)


def test_every_module_has_a_layer(graph):
    for module in graph:
        layer_of(module)


def test_no_import_goes_up_a_layer(graph):
    assert upward_imports(graph) == []


def test_there_is_no_import_circle(graph):
    assert circles(graph) == []


def test_imports_inside_functions_say_they_buy_start_up_time(graph):
    modules = first_party_modules(REPO_ROOT)
    unexplained = []
    for module, edges in graph.items():
        lines = modules[module].read_text(encoding="utf-8").splitlines()
        for target, line, inner in edges:
            explained = "start-up" in lines[line - 1] or "start-up" in lines[line - 2]
            if inner and not explained and (module, target) not in INNER_IMPORTS_ALLOWED:
                unexplained.append(f"{module} line {line} imports {target} inside a function")
    assert unexplained == []


def test_the_checks_catch_an_upward_import_and_a_circle(tmp_path):
    """The checks themselves can fail: a core module importing a stage, and two stage modules importing each other."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("")
    (tmp_path / "vaswani" / "training").mkdir()
    (tmp_path / "vaswani" / "training" / "__init__.py").write_text("")
    (tmp_path / "vaswani" / "errors.py").write_text("from vaswani.training.loop import run\n")
    (tmp_path / "vaswani" / "training" / "loop.py").write_text("from vaswani.training.options import x\nrun = 1\n")
    (tmp_path / "vaswani" / "training" / "options.py").write_text("from vaswani.training import loop\nx = 1\n")
    graph = import_graph(tmp_path)
    assert upward_imports(graph) == ["vaswani.errors (core) line 1 imports vaswani.training.loop (stages)"]
    assert circles(graph) == [["vaswani.training.loop", "vaswani.training.options"]]


def function_lengths(path: Path):
    """(name, line, length without the docstring) of every function of `path`."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            has_docstring = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
            start = body[1].lineno if has_docstring and len(body) > 1 else body[0].lineno
            yield node.name, node.lineno, node.end_lineno - start + 1


def test_no_function_over_100_lines_and_no_module_over_900():
    too_long = []
    for module, path in first_party_modules(REPO_ROOT).items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES and module not in LONG_MODULES_ALLOWED:
            too_long.append(f"{module}: {lines} lines")
        too_long += [f"{module}.{name} (line {line}): {length} lines"
                     for name, line, length in function_lengths(path) if length > MAX_FUNCTION_LINES]  # fmt: skip
    assert too_long == []


def test_vaswani_has_a_subpackage_per_stage_and_a_small_core():
    package = REPO_ROOT / "vaswani"
    assert {p.name for p in package.iterdir() if (p / "__init__.py").is_file()} >= {*STAGES, "cli"}
    assert len([p for p in package.glob("*.py") if p.name != "__init__.py"]) <= 10


def test_the_old_home_of_translator_still_works():
    """`from vaswani.translate import Translator` (the documented name before the layout) is the Translator."""
    from vaswani import translate
    from vaswani.inference import outputs, translator

    assert translate.Translator is translator.Translator
    assert translate.format_hypotheses is outputs.format_hypotheses
    assert set(translate.__all__) <= set(dir(translate))
