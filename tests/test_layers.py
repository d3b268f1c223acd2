"""The code's shape (issue 27): imports only go down the layers, no import cycles, no file of the service or the
engine (explorer/, mirror/, index/: issue 51) over 600 lines, no explorer/ class over 20 methods and no engine class
over 30. An AST walk over every import, module-level and function-level alike (a function-level import is a
dependency too); the package __init__ counts as a module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"mirror": 0, "index": 1, "explorer": 2, "ui": 3, "app": 4}  # the engine, search, the service, Gradio, the app
# The engine's command line (`python -m mirror train --index`) hands the job (mirror.job) the indexes of index.store:
# an entry point, imported by nothing, may use the layer just above its package; never explorer/, ui/ or app.py.
ENTRY_POINTS = {"mirror.__main__": {"index"}}
MAX_LINES = 600
# methods a class may have: a service class that grows past 20 is two concerns. The engine's are the objects a user
# of the library holds (Encoder, VectorIndex): their methods are its API, read in one place, so they may have more.
MAX_METHODS = {"explorer": 20, "mirror": 30, "index": 30}


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    mods = {}
    for path in sorted(root.glob("*.py")) + [p for pkg in LAYERS for p in sorted(root.glob(f"{pkg}/**/*.py"))]:
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[0] in LAYERS:
            mods[".".join(parts)] = path
    return mods


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The project modules `name` imports: `from a.b import c` names a.b, and a.b.c when c is a module."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    out = set()
    for m in found:
        while m and m not in mods:
            m = m.rpartition(".")[0]
        if m and m != name:
            out.add(m)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = project_modules(root)
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def upward(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for name, deps in g.items():
        mine = name.split(".")[0]
        for dep in deps:
            theirs = dep.split(".")[0]
            if LAYERS[theirs] > LAYERS[mine] and theirs not in ENTRY_POINTS.get(name, set()):
                bad.append(f"{name} -> {dep}")
    return sorted(bad)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(root: str) -> None:
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_checks_catch_what_they_forbid(tmp_path):
    """The walk itself: a planted upward import and a planted cycle are both reported."""
    for pkg in ("mirror", "explorer"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "mirror" / "low.py").write_text("def f():\n    from explorer.high import g\n")
    (tmp_path / "explorer" / "high.py").write_text("from explorer import other\n")
    (tmp_path / "explorer" / "other.py").write_text("import explorer.high as high\n")
    g = graph(tmp_path)
    assert upward(g) == ["mirror.low -> explorer.high"]
    assert cycles(g) == [["explorer.high", "explorer.other"]]


def test_imports_only_go_down_the_layers():
    assert upward(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


@pytest.mark.parametrize(
    "path",
    [p for pkg in MAX_METHODS for p in sorted((ROOT / pkg).rglob("*.py"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_files_stay_short_and_classes_small(path):
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: over {MAX_LINES} lines; split it by concern"
    most = MAX_METHODS[path.relative_to(ROOT).parts[0]]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            assert len(methods) <= most, f"{path.name}: {node.name} has {len(methods)} methods"


# Inside the service (issue 59): the server's resources (sessions, models, accounts, disk, CPU, slots and turns, the
# kept runs and their record) below everything; the files in and out (share) above them; planning (tune) and comparing
# (compare) above those, each free to use the other; a run's lifecycle (runs) above all of those, and the service
# that composes them on top. A package imports only its own level or below: nothing under runs/ is reached from
# below, so runs/ is the lifecycle only.
EXPLORER_LAYERS = {"resources": 0, "share": 1, "tune": 2, "compare": 2, "runs": 3, "service": 4}


def explorer_level(module: str) -> tuple[str, int] | None:
    parts = module.split(".")
    if parts[0] != "explorer" or len(parts) < 2 or parts[1] not in EXPLORER_LAYERS:
        return None
    return parts[1], EXPLORER_LAYERS[parts[1]]


def test_the_services_packages_import_only_down():
    bad = []
    for name, deps in graph().items():
        mine = explorer_level(name)
        for dep in deps:
            theirs = explorer_level(dep)
            if mine and theirs and theirs[1] > mine[1]:
                bad.append(f"{name} -> {dep}")
    assert not bad, "\n".join(sorted(bad))


# The web server is the UI's (issue 59): ASGI middleware in front of Gradio, uvicorn's connections and Gradio itself
# live in ui/ (ui.web: the quotas, the connection caps, the download route) and app.py. The service and the engine
# below it never see a request: no module of theirs imports a web framework or server, at module level or in a
# function, and no class of theirs is ASGI middleware (an `async def __call__(self, scope, receive, send)`).
WEB_PACKAGES = {"gradio", "gradio_client", "starlette", "fastapi", "uvicorn", "h11", "httptools", "websockets"}
NO_WEB = ("mirror", "index", "explorer")


def web_parts(path: Path) -> list[str]:
    """What of the web server `path` holds: the web packages it imports, and the ASGI middleware it defines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            names = []
        found += [f"imports {n}" for n in names if n.split(".")[0] in WEB_PACKAGES]
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AsyncFunctionDef) and item.name == "__call__":
                    if [a.arg for a in item.args.args][1:4] == ["scope", "receive", "send"]:
                        found.append(f"ASGI middleware {node.name}")
    return found


def test_the_web_check_catches_what_it_forbids(tmp_path):
    planted = tmp_path / "mod.py"
    planted.write_text(
        "def serve():\n    from starlette.responses import FileResponse\n"
        "class Route:\n    async def __call__(self, scope, receive, send):\n        pass\n"
        "import uvicorn.config\n"
    )
    assert sorted(web_parts(planted)) == [
        "ASGI middleware Route",
        "imports starlette.responses",
        "imports uvicorn.config",
    ]


@pytest.mark.parametrize(
    "path", [p for pkg in NO_WEB for p in sorted((ROOT / pkg).rglob("*.py"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_web_server_below_the_ui(path):
    assert web_parts(path) == [], f"{path.relative_to(ROOT)}: the web server's part belongs in ui/ (ui.web)"


# index/ is search only (issue 59): the training job and its events live in the engine (mirror.job), which builds its
# indexes through the `Indexes` it is handed; nothing in index/ trains or runs the job.
TRAINING = {"mirror.job", "mirror.train", "mirror.choose", "mirror.loss", "mirror.augment", "mirror.terms"}


def test_index_is_search_only():
    g = graph()
    assert {m for m in g if m.startswith("index")}, "no index/ modules found"
    bad = sorted(f"{m} -> {d}" for m, deps in g.items() if m.split(".")[0] == "index" for d in deps if d in TRAINING)
    assert not bad, bad
    assert "mirror.job" in g and not any(d.split(".")[0] == "index" for d in g["mirror.job"])
