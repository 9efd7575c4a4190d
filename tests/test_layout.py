"""The package layout (issue 19): imports point one way, core <- stages <- cli, and there is no import circle.

Read with `ast` only (nothing is imported), so a broken module still gets a clear report. The layers, bottom up:

    modeling_vaswani/   the models: imports nothing of vaswani or tokenization (it loads through trust_remote_code)
    core                vaswani/{errors,constants,fileio,devices,weights,model_folder,options}.py, vaswani/metrics/
    tokenization/       the BPE tokenizer: the core only (its `__main__` is a command, in the cli layer)
    stages              vaswani/{data,training,inference,export,convert,hub,serve,distill}/ and vaswani/translate.py
                        (the old home of Translator)
    cli                 vaswani/cli/, tokenization/__main__.py and the train.py script

A module may import from its own layer and the layers below it. First-party imports inside functions are allowed
only where they buy start-up time (the command line's parser must not load torch), each with a comment saying so.
No module imports another's private (`_name`) names, and the file names and model types of vaswani/constants.py are
spelt nowhere else in vaswani/ (issue 28).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO_ROOT

PACKAGES = ("modeling_vaswani", "tokenization", "vaswani")
CORE = {"vaswani", "vaswani.errors", "vaswani.constants", "vaswani.fileio", "vaswani.devices", "vaswani.weights",
        "vaswani.model_folder", "vaswani.light_tokenizers", "vaswani.options"}  # fmt: skip
STAGES = ("data", "training", "inference", "export", "convert", "hub", "serve", "distill")
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


# Private names (`_name`) that one first-party module still imports from another, each with the reason.
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}


def private_imports(root: Path) -> list[str]:
    """`from <first-party module> import _name` in a first-party module: a private name used outside its module."""
    modules = first_party_modules(root)
    found = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level == 0 and node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append((module, alias.name, node.lineno))
    return [f"{module} line {line} imports {name}" for module, name, line in found
            if (module, name) not in PRIVATE_IMPORTS_ALLOWED]  # fmt: skip


def docstring_nodes(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip


def constant_values(root: Path) -> dict[str, str]:
    """The string constants of vaswani/constants.py (value -> name), except those that are also ordinary words of
    the code: "vaswani" (the command's and the library's name too), "checkpoints" and "logs" (JSON keys too)."""
    values = {}
    for node in ast.parse((root / "vaswani" / "constants.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            values[node.value.value] = node.targets[0].id
    return {value: name for value, name in values.items() if value not in {"vaswani", "checkpoints", "logs"}}


def spelt_constants(root: Path) -> list[str]:
    """String literals of vaswani/ (docstrings aside) that spell a value vaswani/constants.py names."""
    values, found = constant_values(root), []
    for path in sorted((root / "vaswani").rglob("*.py")):
        if path == root / "vaswani" / "constants.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = docstring_nodes(tree)
        found += [
            f"{path.relative_to(root)} line {node.lineno}: {node.value!r} is constants.{values[node.value]}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values
            and id(node) not in docstrings
        ]  # fmt: skip
    return found


def test_no_private_name_is_imported_from_another_module():
    assert private_imports(REPO_ROOT) == []


def test_file_names_and_model_types_are_spelt_once_in_constants():
    assert spelt_constants(REPO_ROOT) == []
    # modeling_vaswani imports nothing of vaswani, so it spells its model types itself: they must agree.
    from modeling_vaswani import VaswaniConfig, VaswaniDecoderConfig, VaswaniEncoderConfig
    from vaswani.constants import DECODER_MODEL_TYPE, ENCODER_MODEL_TYPE, SEQ2SEQ_MODEL_TYPE, VASWANI_MODEL_TYPES

    models = (VaswaniConfig, VaswaniDecoderConfig, VaswaniEncoderConfig)
    assert [config.model_type for config in models] == [SEQ2SEQ_MODEL_TYPE, DECODER_MODEL_TYPE, ENCODER_MODEL_TYPE]
    assert list(VASWANI_MODEL_TYPES) == [SEQ2SEQ_MODEL_TYPE, DECODER_MODEL_TYPE, ENCODER_MODEL_TYPE]


def test_the_checks_catch_a_private_import_and_a_spelt_constant(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("from vaswani.errors import _hidden\n")
    (tmp_path / "vaswani" / "constants.py").write_text('CONFIG_FILE = "config.json"\nPROG = "vaswani"\n')
    (tmp_path / "vaswani" / "errors.py").write_text(
        '"""Reads config.json."""\n_hidden = 1\nPATH = f"{_hidden}/config.json"\nNAME = "config.json"\nCLI = "vaswani"\n'
    )
    assert private_imports(tmp_path) == ["train line 1 imports _hidden"]
    assert spelt_constants(tmp_path) == ["vaswani/errors.py line 4: 'config.json' is constants.CONFIG_FILE"]


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


def test_the_old_home_of_translator_still_works_and_warns():
    """`from vaswani.translate import Translator` (the documented name before the layout) is the Translator, with a
    DeprecationWarning that names its real home and points at the importing line; no module of ours imports it."""
    from vaswani import translate
    from vaswani.inference import outputs, translator

    message = r"vaswani.translate is deprecated: import Translator from vaswani.inference.translator instead"
    with pytest.warns(DeprecationWarning, match=message) as caught:
        from vaswani.translate import Translator
    assert Translator is translator.Translator and caught[0].filename == __file__
    with pytest.warns(DeprecationWarning, match="import format_hypotheses from vaswani.inference.outputs"):
        assert translate.format_hypotheses is outputs.format_hypotheses
    assert set(translate.__all__) <= set(dir(translate))
    with pytest.raises(AttributeError, match="no attribute 'Translators'"):
        translate.Translators  # noqa: B018
    importers = [module for module, edges in import_graph(REPO_ROOT).items() for target, _, _ in edges
                 if target == "vaswani.translate"]  # fmt: skip
    assert importers == []


# ---------------------------------------------------------------------------------------------------------------------
# Tests are found from the module they test (issue 28)
# ---------------------------------------------------------------------------------------------------------------------
# tests/models/ and tests/tokenizer/ are not named modeling_vaswani/ and tokenization/: a test folder on the import path
# must never stand in for the package of the same name (an empty namespace package shadowing the real one).
TEST_FOLDERS = {"models": "modeling_vaswani", "tokenizer": "tokenization", "benchmarks": "benchmarks",
                **{stage: f"vaswani/{stage}" for stage in (*STAGES, "cli", "metrics")}, ".": "vaswani"}  # fmt: skip
# Tests of the whole repository rather than of one module, each with what it checks.
CROSS_CUTTING_TESTS = {
    "test_docs.py": "every example of README.md and docs/",
    "test_faults.py": "the fast subset of benchmarks/bench_faults.py: kills and bad inputs across the commands",
    "test_layout.py": "this file: the layout of every package",
    "test_make.py": "the Makefile's commands: what `make test` (and so CI) runs",
    "test_packaging.py": "the built distribution",
    "test_safety.py": "nothing lost, nothing executed, across the commands",
}


def module_under_test(test_file: Path, tests: Path, root: Path) -> Path | None:
    """The module `tests/FOLDER/test_MODULE[_ASPECT].py` tests: MODULE.py (or MODULE/) in FOLDER's package, the
    longest name that exists; None when there is none."""
    package = root / TEST_FOLDERS[str(test_file.parent.relative_to(tests))]
    words = test_file.stem.removeprefix("test_").split("_")
    for end in range(len(words), 0, -1):
        name = "_".join(words[:end])
        for candidate in (package / f"{name}.py", package / name, package / f"{name}.py".removeprefix("bench_")):
            if candidate.exists():
                return candidate
    if words[0] == "init" and (package / "__init__.py").exists():
        return package / "__init__.py"
    return None


def layout_problems_of_tests(tests: Path, root: Path) -> list[str]:
    problems, names = [], {}
    for test_file in sorted(tests.rglob("test_*.py")):
        folder = str(test_file.parent.relative_to(tests))
        names.setdefault(test_file.name, []).append(str(test_file.relative_to(tests)))
        if folder not in TEST_FOLDERS:
            problems.append(f"{test_file.relative_to(tests)}: tests/{folder}/ mirrors no package")
        elif test_file.name not in CROSS_CUTTING_TESTS and module_under_test(test_file, tests, root) is None:
            problems.append(f"{test_file.relative_to(tests)}: names no module of {TEST_FOLDERS[folder]}/ "
                            "(tests/FOLDER/test_MODULE[_ASPECT].py)")  # fmt: skip
    problems += [
        f"{name} is in {paths}: test file names must be unique" for name, paths in names.items() if len(paths) > 1
    ]
    return problems


def test_every_test_file_is_found_from_the_module_it_tests():
    assert layout_problems_of_tests(REPO_ROOT / "tests", REPO_ROOT) == []


def test_a_misplaced_or_duplicated_test_file_is_reported(tmp_path):
    (tmp_path / "vaswani" / "training").mkdir(parents=True)
    (tmp_path / "vaswani" / "training" / "options.py").touch()
    tests = tmp_path / "tests"
    (tests / "training").mkdir(parents=True)
    (tests / "training" / "test_options_yaml.py").touch()  # found: training/options.py
    (tests / "training" / "test_nothing.py").touch()
    (tests / "nowhere").mkdir()
    (tests / "nowhere" / "test_options_yaml.py").touch()
    problems = layout_problems_of_tests(tests, tmp_path)
    assert problems == [
        "nowhere/test_options_yaml.py: tests/nowhere/ mirrors no package",
        "training/test_nothing.py: names no module of vaswani/training/ (tests/FOLDER/test_MODULE[_ASPECT].py)",
        "test_options_yaml.py is in ['nowhere/test_options_yaml.py', 'training/test_options_yaml.py']: test file names "
        "must be unique",
    ]
