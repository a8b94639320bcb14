"""Every page of the docs site starts with a runnable command, and that command works.

For each page in mkdocs.yml's nav, the first fenced block (before the first `## ` heading) is
checked according to what it is:

- python, self-contained: run in a fresh interpreter on device "tpu" (a timeout each; a
  leading comment `# VAR=value python this.py` sets the environment it asks for);
- python that needs what this machine's `make test` does not have (a model on disk, torchrun,
  `.venv-serve`): parsed, and every `tpuc` module and name it imports must exist
  (NOT_RUN below, each with its reason);
- bash: every `make` target must exist (`make -n TARGET` succeeds), every `python -m MODULE`
  / `torchrun -m MODULE` module, every `python FILE` script and every `tpuc SUBCOMMAND` must
  exist; `python -c CODE` must parse; heredoc bodies fed to python must parse. Commands the
  checker does not know fail the test, unless COMMANDS_OK lists them.

The reference pages are also checked against the code: every variable tpuc reads appears in
environment.md, every key of `torch.tpu.stats()` in stats.md, every public name of
`torch.tpu` in api.md, every Makefile target in make.md.

`test_the_checker_fails_on_a_broken_page` shows that a page with a missing make target, a
missing module or a python block that raises is reported.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PY_TIMEOUT = 120  # seconds per python block (the slowest takes ~10 CPU-seconds: a compile)

# Pages whose first block cannot start with a runnable command, and why.
NO_COMMAND = {
    "op_coverage.md": "generated table (make conformance writes it; make.md names the target)",
    "op_coverage_models.md": "generated table (tests/conformance/model_usage.py writes it)",
    "architecture.md": "its first block is the layer diagram that tools/check_layers.py "
                       "checks against csrc/ (make check-layers)",
}

# Python first blocks that are parsed and whose tpuc imports are checked, but not run here.
NOT_RUN = {
    "models.md": "loads a model from a placeholder path (path/to/saved_model)",
    "distributed.md": "a train.py for `torchrun --nproc_per_node=2` (tests/distributed runs "
                      "the same FSDP2 path)",
    "weight_sync.md": "starts vLLM from .venv-serve (make serve-setup; tests/post_training "
                      "runs it under make test-post)",
}

# Commands a bash block may name that the checker does not verify, and why.
COMMANDS_OK = {
    "pip": "installs packages (install.md); not run by a test",
    "cd": "shell navigation",
    "export": "sets a variable",
    "curl": "queries a server the block started (sglang.md); tests/sgl/test_server.py sends "
            "the same requests",
}

# Third-party modules run in other venvs (their existence is that venv's business).
THIRD_PARTY_MODULES = {
    "vllm": ".venv-serve (make serve-setup)",
    "sglang": ".venv-torch-2.14.1 (make sglang-setup; tests/sgl runs it under make test-v214)",
    "torch": "PyTorch itself",
    "pytest": "the test runner",
}


# ---- parsing ------------------------------------------------------------------------------


def nav_pages() -> list[str]:
    """The pages of mkdocs.yml's nav, in order (commented entries are not pages yet)."""
    pages = []
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        in_nav = False
        for line in f:
            if line.startswith("nav:"):
                in_nav = True
                continue
            if in_nav and line and not line[0].isspace() and not line.startswith("#"):
                break
            m = re.match(r"\s*-\s[^#]*?:\s*([\w./-]+\.md)\s*$", line)
            if in_nav and m:
                pages.append(m.group(1))
    return pages


def first_block(text: str) -> tuple[str, str] | None:
    """(language, body) of the first fenced block, if it comes before the first `## `."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## "):
            return None
        m = re.match(r"^```(\w*)\s*$", line)
        if m:
            body = []
            for b in lines[i + 1:]:
                if b.startswith("```"):
                    return m.group(1), "\n".join(body)
                body.append(b)
            return None
    return None


def _make_targets() -> set[str]:
    with open(os.path.join(ROOT, "Makefile")) as f:
        return {m.group(1) for m in re.finditer(r"^([a-zA-Z0-9][\w-]*):(?!=)", f.read(), re.M)}


def _module_exists(mod: str) -> bool:
    parts = mod.split(".")
    for base in (ROOT, os.path.join(ROOT, "python")):
        p = os.path.join(base, *parts)
        if os.path.isfile(p + ".py") or os.path.isfile(os.path.join(p, "__init__.py")):
            return True
    return False


def _module_source(mod: str) -> str | None:
    parts = mod.split(".")
    for base in (ROOT, os.path.join(ROOT, "python")):
        p = os.path.join(base, *parts)
        for f in (p + ".py", os.path.join(p, "__init__.py")):
            if os.path.isfile(f):
                with open(f) as fh:
                    return fh.read()
    return None


def _tpuc_import_problems(code: str) -> list[str]:
    """Every `import tpuc.x` / `from tpuc.x import a` must name a module and names that exist."""
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tpuc":
            src = _module_source(node.module)
            if src is None:
                out.append(f"module {node.module} does not exist")
                continue
            for a in node.names:
                if _module_exists(f"{node.module}.{a.name}"):
                    continue
                if not re.search(rf"^(def|class)\s+{a.name}\b|^{a.name}\s*[:=]|\b{a.name}\b.*import|"
                                 rf"^from .* import .*\b{a.name}\b", src, re.M):
                    out.append(f"{node.module} has no {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tpuc" and not _module_exists(a.name):
                    out.append(f"module {a.name} does not exist")
    return out


def _shell_commands(body: str) -> list[tuple[str, str | None]]:
    """(command line, heredoc body or None): continuations joined, comments dropped."""
    out: list[tuple[str, str | None]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        # drop a trailing comment (not inside quotes: good enough for these pages)
        stripped = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not stripped:
            continue
        heredoc = None
        m = re.search(r"<<-?\s*'?(\w+)'?", stripped)
        if m:
            end, doc = m.group(1), []
            while i < len(lines) and lines[i].strip() != end:
                doc.append(lines[i])
                i += 1
            i += 1
            heredoc = "\n".join(doc)
            stripped = stripped[:m.start()].strip()
        out.append((stripped, heredoc))
    return out


# `make -n TARGET`'s outcome, once per target and session: several pages start with the same
# command (`make test`: three), and each dry run of it evaluates the Makefile's $(shell ...)
# calls (python imports), seconds each; the Makefile does not change during a run.
_DRY_RUNS: dict[str, str | None] = {}


def check_shell(body: str) -> list[str]:
    """Problems of a bash block (empty: fine)."""
    problems = []
    targets = _make_targets()
    for cmd, heredoc in _shell_commands(body):
        try:
            # `[--flag=value]` marks an optional flag: check it as given
            words = shlex.split(re.sub(r"\[(-[^\]\s]*(?:\s+[^\]\s-][^\]\s]*)?)\]", r"\1", cmd))
        except ValueError as e:
            problems.append(f"{cmd!r}: {e}")
            continue
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value prefixes
        if not words or words[0].startswith("$"):
            continue  # an assignment alone, or a command held in a variable set above
        prog = os.path.basename(words[0])
        if prog == "make":
            for t in words[1:]:
                if t.startswith("-") or "=" in t:
                    continue
                if t not in targets:
                    problems.append(f"make {t}: no such target in the Makefile")
                    continue
                if t not in _DRY_RUNS:
                    env = {k: v for k, v in os.environ.items()
                           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # under `make test` too
                    r = subprocess.run(["make", "-n", t], cwd=ROOT, capture_output=True, text=True,
                                       timeout=60, env=env)
                    _DRY_RUNS[t] = (f"make -n {t} failed: {r.stderr.strip()[-300:]}"
                                    if r.returncode != 0 else None)
                if _DRY_RUNS[t] is not None:
                    problems.append(_DRY_RUNS[t])
        elif prog in ("python", "python3", "torchrun") or re.match(r"python3(\.\d+)?$", prog):
            args = words[1:]
            if "-m" in args:
                mod = args[args.index("-m") + 1]
                top = mod.split(".")[0]
                if top not in THIRD_PARTY_MODULES and not _module_exists(mod):
                    problems.append(f"{cmd!r}: module {mod} does not exist")
            elif "-c" in args:
                code = args[args.index("-c") + 1]
                try:
                    ast.parse(code)
                except SyntaxError as e:
                    problems.append(f"{cmd!r}: {e}")
            else:
                files = [a for a in args if not a.startswith("-")]
                if files and files[0] != "-" and not os.path.exists(os.path.join(ROOT, files[0])):
                    problems.append(f"{cmd!r}: {files[0]} does not exist")
            if heredoc is not None:
                try:
                    ast.parse(heredoc)
                except SyntaxError as e:
                    problems.append(f"heredoc of {cmd!r}: {e}")
        elif prog == "tpuc":
            sub = next((w for w in words[1:] if not w.startswith("-")), None)
            with open(os.path.join(ROOT, "python", "tpuc", "cli.py")) as f:
                cli = f.read()
            if sub and f'add_parser("{sub}"' not in cli:
                problems.append(f"{cmd!r}: tpuc has no subcommand {sub}")
        elif prog not in COMMANDS_OK:
            problems.append(f"{cmd!r}: the checker does not know {prog!r} (add it to "
                            "COMMANDS_OK with a reason, or start the page with a checkable command)")
    return problems


def _block_env(code: str) -> dict[str, str]:
    """`# VAR=value python this.py` on the block's first line: the environment it asks for."""
    first = code.lstrip().splitlines()[0] if code.strip() else ""
    m = re.match(r"#\s*((?:[A-Z_][A-Z0-9_]*=\S+\s+)+)python", first)
    return dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}


# Variables read when the device runtime is created (at the first tpu tensor), not at
# `import torch`: a forked child may still set them (checked: a child of a process that
# imported torch sets TPUC_CPU_DEVICE_COUNT=4 and sees 4 devices).
_LAZY_ENV = {"TPUC_CPU_DEVICE_COUNT"}

# Runs jobs [{name, code, env, timeout}] (JSON on stdin): torch is imported once, the device is
# never created in this process, and each job runs in a forked child (two at a time) as a
# fresh `__main__`: its own device runtime, eager mode and counters, only the import shared.
_RUNNER = r"""
import json, os, shutil, signal, sys, tempfile, traceback
jobs = json.load(sys.stdin)
import torch
assert not torch.tpu.is_initialized(), "the runner must not create the device"
out_dir, results, running = tempfile.mkdtemp(prefix="docs-blocks-"), {}, {}
def start(job):
    path = os.path.join(out_dir, str(len(results) + len(running)))
    pid = os.fork()
    if pid == 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1); os.dup2(fd, 2)
        os.environ.update(job["env"])
        signal.alarm(job["timeout"])
        code = 0
        try:
            exec(compile(job["code"], job["name"], "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            code = 0 if e.code in (None, 0) else 1
            if code: print("SystemExit:", e.code)
        except BaseException:
            traceback.print_exc(); code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    running[pid] = (job["name"], path)
queue = list(jobs)
while queue or running:
    while queue and len(running) < 2:
        start(queue.pop(0))
    pid, status = os.wait()
    name, path = running.pop(pid)
    with open(path) as f:
        results[name] = {"status": status, "output": f.read()[-3000:]}
shutil.rmtree(out_dir, ignore_errors=True)  # the blocks' outputs are in results now
print("RESULTS " + json.dumps(results))
"""


def run_python_blocks(jobs: list[tuple[str, str]]) -> dict[str, tuple[bool, str]]:
    """{name: (ok, output)} for python blocks [(code, name)], run as _RUNNER does; a block
    that asks for a variable read at `import torch` gets an interpreter of its own."""
    shared, own = [], []
    for code, name in jobs:
        env = _block_env(code)
        job = {"name": name, "code": code, "env": env, "timeout": PY_TIMEOUT}
        (own if set(env) - _LAZY_ENV else shared).append(job)
    out: dict[str, tuple[bool, str]] = {}
    for batch, env in [(shared, {})] + [([j], j["env"]) for j in own]:
        if not batch:
            continue
        r = subprocess.run([sys.executable, "-c", _RUNNER], cwd=ROOT, input=json.dumps(batch),
                           env=dict(os.environ, **env), capture_output=True, text=True,
                           timeout=PY_TIMEOUT * len(batch) + 60)
        line = next((x for x in r.stdout.splitlines() if x.startswith("RESULTS ")), None)
        if line is None:
            for j in batch:
                out[j["name"]] = (False, f"the runner failed: {r.stderr[-1500:]}")
            continue
        for name, res in json.loads(line[len("RESULTS "):]).items():
            st = res["status"]
            why = ("" if st == 0 else f"killed by signal {st & 0x7f} (SIGALRM: over {PY_TIMEOUT} s)"
                   if st & 0x7f else f"exit status {st >> 8}")
            out[name] = (st == 0, f"{why}\n{res['output']}")
    return out


def run_python(code: str, name: str) -> list[str]:
    ok, output = run_python_blocks([(code, name)])[name]
    return [] if ok else [f"{name}: {output.strip()[-1500:]}"]


def check_page(path: str, run: bool = True) -> list[str]:
    """Problems of one page's first block (empty: fine)."""
    name = os.path.basename(path)
    with open(path) as f:
        block = first_block(f.read())
    if name in NO_COMMAND:
        return []
    if block is None:
        return [f"{name}: no fenced block before its first `## ` heading"]
    lang, body = block
    if lang == "python":
        try:
            ast.parse(body)
        except SyntaxError as e:
            return [f"{name}: {e}"]
        problems = [f"{name}: {p}" for p in _tpuc_import_problems(body)]
        if name not in NOT_RUN and run and not problems:
            problems += run_python(body, name)
        return problems
    if lang in ("bash", "sh", "console", "shell"):
        return [f"{name}: {p}" for p in check_shell(body)]
    return [f"{name}: its first block is ```{lang or '(no language)'}: start with a bash or "
            "python command"]


# ---- the tests ----------------------------------------------------------------------------


def test_every_nav_page_exists_and_the_allow_lists_name_pages():
    pages = nav_pages()
    assert "quickstart.md" in pages and "environment.md" in pages
    for p in pages:
        assert os.path.isfile(os.path.join(DOCS, p)), p
    for listed in list(NO_COMMAND) + list(NOT_RUN):
        assert listed in pages, f"{listed} is allow-listed but not in the nav"


_BROKEN = "import torch\nx = torch.ones(2, device='tpu')\nraise SystemExit('the example is wrong')\n"

_PROBE = """
import json, sys, torch
sys.path.insert(0, "tools")
import docs_api, tpuc.device as d
torch.ones(1, device="tpu").add(1).cpu()
print("PROBE " + json.dumps([docs_api.public_names(d), sorted(torch.tpu.stats())]))
"""


@pytest.fixture(scope="module")
def block_runs() -> dict[str, tuple[bool, str]]:
    """Every runnable first block of the nav's pages, and the reference probe, run once."""
    jobs = []
    for p in nav_pages():
        with open(os.path.join(DOCS, p)) as f:
            block = first_block(f.read())
        if block and block[0] == "python" and p not in NOT_RUN and p not in NO_COMMAND:
            jobs.append((block[1], p))
    jobs.append((_PROBE, "reference-probe"))
    jobs.append((_BROKEN, "broken-example"))  # must fail: test_the_checker_fails_on_a_broken_page
    return run_python_blocks(jobs)


def test_every_page_starts_with_a_command_that_works(block_runs):
    problems = []
    for p in nav_pages():
        problems += check_page(os.path.join(DOCS, p), run=False)  # parsing, imports, shell
    for name, (ok, output) in block_runs.items():
        if not ok and name not in ("reference-probe", "broken-example"):
            problems.append(f"{name}: {output.strip()[-1500:]}")
    assert not problems, "\n".join(problems)


def test_the_checker_fails_on_a_broken_page(tmp_path, block_runs):
    page = tmp_path / "broken.md"
    page.write_text("# Broken\n\n```bash\nmake no-such-target\npython -m tpuc.no_such_module\n"
                    "tpuc no-such-subcommand\nfrobnicate --now\n```\n")
    problems = check_page(str(page))
    assert any("no-such-target" in p for p in problems), problems
    assert any("tpuc.no_such_module" in p for p in problems), problems
    assert any("no-such-subcommand" in p for p in problems), problems
    assert any("frobnicate" in p for p in problems), problems
    page.write_text("# Broken\n\n```python\nfrom tpuc.device import no_such_name\n```\n")
    assert any("no_such_name" in p for p in check_page(str(page))), "import not caught"
    ok, output = block_runs["broken-example"]  # a block that raises, run like the pages' blocks
    assert not ok and "exit status 1" in output and "the example is wrong" in output, output
    page.write_text("# No command\n\nText.\n\n## Section\n\n```bash\nmake test\n```\n")
    assert check_page(str(page)) == [f"broken.md: no fenced block before its first `## ` heading"]


def _variables_read_by_the_code() -> set[str]:
    found = set()
    for base in ("csrc", os.path.join("python", "tpuc"), os.path.join("python", "tpuc_entry")):
        for d, _, files in os.walk(os.path.join(ROOT, base)):
            if os.sep + "tests" in d:
                continue  # the C core's test programs (TPUC_TEST_DTYPES) are listed apart
            for fn in files:
                if not fn.endswith((".c", ".h", ".cpp", ".py")):
                    continue
                with open(os.path.join(d, fn), errors="replace") as f:
                    src = f.read()
                # a variable's name as a whole string literal: getenv("TPUC_X"),
                # os.environ.get("TPUC_X"), switch_on("TPUC_X"), X_ENV = "TPUC_X"
                found |= set(re.findall(r'"(TPUC_[A-Z0-9_]+)"', src))
    return found


def test_environment_page_lists_every_variable_the_code_reads():
    with open(os.path.join(DOCS, "environment.md")) as f:
        page = f.read()
    read = _variables_read_by_the_code()
    assert {"TPUC_EAGER", "TPUC_CACHE_DIR", "TPUC_DONATE"} <= read  # the scan works
    missing = sorted(v for v in read if f"`{v}`" not in page)
    assert not missing, f"read by the code, not in docs/environment.md: {missing}"


def test_make_page_lists_every_target():
    with open(os.path.join(DOCS, "make.md")) as f:
        page = f.read()
    missing = sorted(t for t in _make_targets() if f"make {t}" not in page)
    assert not missing, f"Makefile targets not in docs/make.md: {missing}"


def test_api_and_stats_pages_list_what_the_code_has(block_runs):
    ok, output = block_runs["reference-probe"]
    assert ok, output
    line = next(x for x in output.splitlines() if x.startswith("PROBE "))
    names, keys = json.loads(line[len("PROBE "):])
    with open(os.path.join(DOCS, "api.md")) as f:
        api = f.read()
    with open(os.path.join(DOCS, "stats.md")) as f:
        stats = f.read()
    missing = [n for n in names if f"| `{n}" not in api]
    assert not missing, f"torch.tpu names not in docs/api.md (run tools/docs_api.py): {missing}"
    missing = [k for k in keys if f"`{k}`" not in stats]
    assert not missing, f"torch.tpu.stats() keys not in docs/stats.md: {missing}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
