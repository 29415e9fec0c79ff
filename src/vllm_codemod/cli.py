"""Command-line entry point.

Sub-commands live in ``vllm_codemod.commands.<module>`` and are imported only when
invoked, so ``vllm-codemod check`` never pays for ``ruamel.yaml`` and ``--help`` stays
instant on a build machine.
"""

from __future__ import annotations

import importlib
import sys
from typing import Dict, List, Optional, Tuple

import click

from . import __version__

#: command name -> (module, attribute, one-line help)
COMMANDS: Dict[str, Tuple[str, str, str]] = {
    "apply": ("apply", "apply", "Patch the vLLM tree (all pending transforms, atomically)."),
    "diff": ("diff", "diff", "Show what apply would change as a unified diff; write nothing."),
    "check": (
        "check",
        "check",
        "Report each transform as applied/pending/not-applicable/conflict.",
    ),
    "revert": ("revert", "revert", "Restore the original bytes of everything the tool changed."),
    "list": ("list_cmd", "list_cmd", "List the transforms and the vLLM versions they know."),
    "verify": (
        "verify",
        "verify",
        "Run the kernels installed in the patched tree vs. a reference.",
    ),
    "tune-config": ("tune_config", "tune_config", "Retune a vLLM run config (YAML) in place."),
    "tune": (
        "tune",
        "tune",
        "Measure the tree's kernels on this accelerator; write a tuning file.",
    ),
}


class LazyGroup(click.Group):
    """A group that imports a sub-command's module on first use."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attribute, _ = entry
        module = importlib.import_module(f"vllm_codemod.commands.{module_name}")
        return getattr(module, attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing help must not import every command module.
        rows = [(name, help_text) for name, (_, _, help_text) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""\b
Examples:
  vllm-codemod diff  --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod apply --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod check --json
  vllm-codemod revert --vllm-root ./site-packages/vllm
""",
)
@click.version_option(__version__, "-V", "--version", prog_name="vllm-codemod")
def cli() -> None:
    """Restore fast long-context decode in vendor forks of vLLM.

    Applies idempotent, structure-matching codemods to an installed vllm tree:
    the paged_attention_v2 stub becomes a call into bundled kernels, the V1/V2
    dispatch heuristic comes back, and prefix-prefill NUM_WARPS is retuned.
    """


def main() -> None:
    """Console entry point: usage errors, like every other error, are one line + exit 2."""
    try:
        code = cli.main(prog_name="vllm-codemod", standalone_mode=False)
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "vllm-codemod"
        click.echo(
            f"vllm-codemod: error: {exc.format_message()} (see `{command} --help`)", err=True
        )
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"vllm-codemod: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("vllm-codemod: aborted", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
