"""vllm-codemod: idempotent libcst codemods for vendor forks of vLLM."""

__version__ = "0.1.0"
