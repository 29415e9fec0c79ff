"""Import-cost guard: ``check`` on a real tree must not load the expensive modules.

``libcst.matchers`` alone (a huge generated module) costs a third of the CLI's
one-second budget on a 2-core machine; torch and ruamel.yaml are heavier still and
the tool must work where they are not installed.  This is a deterministic check of
what a fresh interpreter has imported after a full ``check``, not a timing test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from treeutil import copy_fixture

FORK = "bi-v100/corex-0.8.3"

#: Modules (and their submodules) that ``check`` must never import.  "ruamel.yaml", not
#: "ruamel": ruamel.yaml < 0.18 creates the bare namespace package at interpreter start
#: (a -nspkg.pth file), which imports no YAML code.
FORBIDDEN = ("libcst.matchers", "torch", "ruamel.yaml")

_SCRIPT = """\
import json, sys
from vllm_codemod.cli import cli
try:
    cli(["check", "--site-packages", sys.argv[1]])
except SystemExit as e:
    code = e.code
forbidden = json.loads(sys.argv[2])
loaded = sorted(
    name for name in sys.modules
    if any(name == f or name.startswith(f + ".") for f in forbidden)
)
print(json.dumps({"code": code, "loaded": loaded, "libcst": "libcst" in sys.modules}))
"""


def test_check_loads_no_matchers_torch_or_ruamel(tmp_path):
    site = copy_fixture(FORK, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(site), json.dumps(FORBIDDEN)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    # The check really ran: every transform is pending on the fork tree (exit 1), and
    # libcst did the parsing, so an empty `loaded` is not a vacuous pass.
    assert result["code"] == 1, proc.stdout + proc.stderr
    assert result["libcst"] is True
    assert result["loaded"] == [], proc.stdout


_HELP_SCRIPT = """\
import json, sys
from vllm_codemod.cli import cli
try:
    cli(json.loads(sys.argv[1]))
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "torch": sorted(
    name for name in sys.modules if name == "torch" or name.startswith("torch.")
)}))
"""


def test_help_of_the_cli_and_of_tune_imports_no_torch():
    # tune's measuring modules import torch at their top: only a tune run may load them.
    for args in (["--help"], ["tune", "--help"]):
        proc = subprocess.run(
            [sys.executable, "-c", _HELP_SCRIPT, json.dumps(args)], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads(proc.stdout.splitlines()[-1])
        assert result == {"code": 0, "torch": []}, (args, proc.stdout)


def test_check_of_a_clean_patched_tree_imports_no_libcst(tmp_path):
    # A container-start `check` on a tree as `apply` left it: every verdict comes from
    # the verdict cache (the first check after apply fills it), so nothing is parsed
    # and libcst, ~0.12 s of CPU, is never imported.
    site = copy_fixture(FORK, tmp_path)
    env = {**os.environ, "VLLM_CODEMOD_CACHE_DIR": str(tmp_path / "cache")}
    cli = [sys.executable, "-m", "vllm_codemod"]
    subprocess.run([*cli, "apply", "-q", "--site-packages", str(site)], env=env, check=True)
    first = subprocess.run(
        [*cli, "check", "--json", "--site-packages", str(site)], env=env, capture_output=True
    )
    assert first.returncode == 0, first.stdout + first.stderr
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(site), json.dumps(["libcst"])],
        env=env,
        capture_output=True,
        text=True,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] == 0, proc.stdout + proc.stderr
    assert result["libcst"] is False, proc.stdout
    assert result["loaded"] == [], proc.stdout
    again = subprocess.run(
        [*cli, "check", "--json", "--site-packages", str(site)], env=env, capture_output=True
    )
    assert again.stdout == first.stdout  # the same report, parsed or remembered
