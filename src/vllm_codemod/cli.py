"""Command-line entry point.

Sub-commands live in ``vllm_codemod.commands.<module>`` and are imported only when
invoked, so ``vllm-codemod check`` never pays for ``ruamel.yaml`` and ``--help`` stays
instant on a build machine.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from . import __version__
from .boundary import classify, exit_code_table, say, sigterm_as_interrupt

#: ``vllm-codemod -v <command>``: the count, for the command's output options
VERBOSE_KEY = "vllm_codemod.verbose"

#: command name -> (module, attribute, one-line help)
COMMANDS: Dict[str, Tuple[str, str, str]] = {
    "apply": ("apply", "apply", "Patch the vLLM tree (all pending transforms, atomically)."),
    "diff": ("diff", "diff", "Show what apply would change as a unified diff; write nothing."),
    "check": (
        "check",
        "check",
        "Report each transform as applied/pending/not-applicable/conflict.",
    ),
    "status": (
        "status",
        "status",
        "The tree, version, fork markers, transforms, recorded options, and whether "
        "anything calls the patched code.",
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


class ToolGroup(LazyGroup):
    """The top-level group: every run, however it ends, ends in :mod:`.boundary`'s table.

    ``main`` is what the console script, ``python -m vllm_codemod`` and click's test
    runner all call, so the boundary sits here rather than in a wrapper only one of
    them would go through.
    """

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        # Bare ``vllm-codemod`` asks for help, as bare ``pip`` does: print it on stdout
        # and exit 0.  Click 8.2 turned this case into a usage error (exit 2).
        if not args and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def main(  # type: ignore[override]
        self,
        args: Optional[Sequence[str]] = None,
        prog_name: Optional[str] = None,
        complete_var: Optional[str] = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        with sigterm_as_interrupt():
            try:
                result = super().main(
                    args, prog_name or "vllm-codemod", complete_var, False, **extra
                )
                code = result if isinstance(result, int) else 0
            except SystemExit as exc:
                code = _system_exit_status(exc)
            except (Exception, KeyboardInterrupt, click.Abort) as exc:
                code = _fail(exc, list(sys.argv[1:] if args is None else args))
        if not standalone_mode:
            return code
        sys.exit(code)


def _fail(exc: BaseException, argv: List[str]) -> int:
    """Say why on stderr; under --json also print the failure as the one JSON document.

    Failures inside a command print their document in :mod:`.commands._output`; what
    reaches here failed before the command ran (a usage error, an unknown command).
    """
    code, message = classify(exc)
    if message is not None:
        say(message)
    if "--json" in argv:
        from .report import dumps, error_document

        command = next((a for a in argv if a in COMMANDS), "vllm-codemod")
        text = message or type(exc).__name__
        text = text[len("error: ") :] if text.startswith("error: ") else text
        click.echo(dumps(error_document(command, code, text)))
    return code


def _system_exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    click.echo(str(exc.code), err=True)
    return 2


@click.group(
    cls=ToolGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""\b
Examples:
  vllm-codemod diff  --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod apply --site-packages /usr/local/lib/python3.10/site-packages
  vllm-codemod status --python /opt/venv/bin/python
  vllm-codemod check --json
  vllm-codemod revert --vllm-root ./site-packages/vllm

"""
    + exit_code_table(),
)
@click.version_option(__version__, "-V", "--version", prog_name="vllm-codemod")
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log what the tool decides on stderr: -v at INFO, -vv at DEBUG (as the command's own -v).",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Restore fast long-context decode in vendor forks of vLLM.

    Applies idempotent, structure-matching codemods to an installed vllm tree:
    the paged_attention_v2 stub becomes a call into bundled kernels, the V1/V2
    dispatch heuristic comes back, and prefix-prefill NUM_WARPS is retuned.
    """
    ctx.meta[VERBOSE_KEY] = verbose  # added to the command's own -v (commands/_output.py)


def main() -> None:
    """Console entry point (``vllm-codemod``); ``python -m vllm_codemod`` calls it too."""
    cli.main(prog_name="vllm-codemod")


if __name__ == "__main__":
    main()
