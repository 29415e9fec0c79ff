"""``python -m vllm_codemod``: the same program as the ``vllm-codemod`` console script.

Useful where the console script is not on PATH (a venv not activated, ``pip install
--user``), and it pins the interpreter explicitly.
"""

from vllm_codemod.cli import main

if __name__ == "__main__":
    main()
