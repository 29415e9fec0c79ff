"""``python -m vllm_codemod``: the same CLI as the ``vllm-codemod`` script, for images
where the script's directory is not on PATH or several interpreters are installed."""

from .cli import main

if __name__ == "__main__":
    main()
