"""Sub-commands, one module each (imported lazily by vllm_codemod.cli)."""
