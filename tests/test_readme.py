"""The commands a newcomer copies from the README and from ``--help`` work as written.

They are run as text, through bash, from the checkout's root like a reader would:
a stale flag, a path that moved or a step that cannot be repeated fails here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from treeutil import FIXTURES, REPO, snapshot

README = REPO / "README.md"
FORK = "vendor_fixtures/bi-v100/corex-0.8.3"
HAS_TORCH = importlib.util.find_spec("torch") is not None


def section_commands(heading: str) -> List[str]:
    """The shell lines of the ```bash blocks under a ``## heading`` (comments dropped)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else len(text)]
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", body, flags=re.DOTALL):
        for line in block.splitlines():
            command = re.split(r"\s+#\s", line, maxsplit=1)[0].strip()
            if command:
                lines.append(command)
    return lines


def _env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_CODEMOD_")}
    # The interpreter's own scripts first: `vllm-codemod` as installed with it.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _bash(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command], cwd=REPO, env=_env(), capture_output=True, text=True
    )


def test_try_it_commands_work_verbatim_twice(tmp_path):
    commands = section_commands("Try it on the embedded fork tree")
    assert commands[0] == f"vllm-codemod diff --site-packages {FORK}"
    assert any(c.startswith("rm -rf /tmp/site && cp -r ") for c in commands)
    scratch = str(tmp_path / "site")
    for repeat in range(2):  # the second round starts from the first one's /tmp/site
        for command in commands:
            if repeat and command.startswith("vllm-codemod verify"):
                continue  # seconds of kernel runs; the round is about the copy and apply
            proc = _bash(command.replace("/tmp/site", scratch))
            output = f"{command}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr}"
            if command.startswith("vllm-codemod diff"):
                assert proc.returncode == 1, output  # changes pending, nothing written
            elif command.startswith("vllm-codemod verify") and not HAS_TORCH:
                assert proc.returncode == 2 and "needs torch" in proc.stderr, output
            else:
                assert proc.returncode == 0, output
        assert snapshot(Path(scratch)) == snapshot(FIXTURES / "bi-v100" / "corex-0.8.3")
    assert not (Path(scratch) / "corex-0.8.3").exists(), "cp -r nested the copy"


def section_transcripts(heading: str) -> List[List[str]]:
    """The ```text blocks under a ``## heading`` that start with ``$ command``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else len(text)]
    blocks = re.findall(r"```text\n(.*?)```", body, flags=re.DOTALL)
    return [b.splitlines() for b in blocks if b.startswith("$ ")]


_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")


def test_try_it_status_output_is_what_status_prints(tmp_path):
    """The pasted ``status`` screens are real: each pasted line (``...`` elides) is a line
    of the command's output, in order; the time of the patch is the run's own."""
    transcripts = section_transcripts("Try it on the embedded fork tree")
    assert len(transcripts) == 2, "the demo's status screen and a live one"
    scratch = str(tmp_path / "site")
    for command in section_commands("Try it on the embedded fork tree"):
        if command.startswith(("rm -rf /tmp/site", "vllm-codemod apply")):
            assert _bash(command.replace("/tmp/site", scratch)).returncode == 0
    for lines in transcripts:
        command = lines[0][2:].replace("/tmp/site", scratch)
        proc = _bash(command)
        assert proc.returncode == 0, proc.stderr
        printed = [_STAMP.sub("TIME", line.rstrip()) for line in proc.stdout.splitlines()]
        rest = iter(printed)
        for pasted in lines[1:]:
            if pasted == "...":
                continue
            want = _STAMP.sub("TIME", pasted.replace("/tmp/site", scratch).rstrip())
            assert any(line == want for line in rest), f"{lines[0]}: not printed: {want}"
    assert "live       no:" in transcripts[0][-1] and "live       yes:" in "".join(transcripts[1])


def test_diff_help_examples_run_on_the_embedded_fork():
    helped = _bash("vllm-codemod diff --help")
    assert helped.returncode == 0, helped.stderr
    examples = helped.stdout.split("Examples:", 1)[1].strip().splitlines()
    assert examples
    for example in examples:
        command = example.strip().split(" | ")[0]
        assert FORK in command, f"{command}: names no tree a reader has"
        proc = _bash(command)
        assert proc.returncode == 1, f"{command}: exit {proc.returncode}\n{proc.stderr}"
        assert "+++ b/vllm/_custom_ops.py" in proc.stdout


#: Options every command (or every tree command) shares: the README's Usage section
#: documents them once, above the per-command sections.
SHARED = {"--help", "-h", "--json", "--quiet", "-q", "--verbose", "-v", "--color", "--no-color"}
TREE = {"--site-packages", "--vllm-root", "--python"}


def _readme_sections() -> Dict[str, str]:
    text = (REPO / "README.md").read_text()
    parts = re.split(r"^### `vllm-codemod ([a-z-]+)[^`]*`\n", text, flags=re.M)
    return {parts[i]: parts[i + 1].split("\n## ", 1)[0] for i in range(1, len(parts), 2)}


def test_every_option_of_every_command_is_in_its_readme_section():
    import click

    from vllm_codemod.cli import COMMANDS, cli

    sections = _readme_sections()
    usage = (REPO / "README.md").read_text().split("## Usage", 1)[1].split("### ", 1)[0]
    ctx = click.Context(cli)
    missing = []
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert name in sections, f"no README section for {name}"
        for param in command.params:
            for flag in [*param.opts, *getattr(param, "secondary_opts", [])]:
                if not flag.startswith("-"):
                    continue
                where = usage if flag in SHARED | TREE else sections[name]
                if not re.search(re.escape(flag) + r"(?![a-z-])", where):
                    missing.append(f"{name} {flag}")
    assert missing == []
