"""``vllm-codemod tune``: measure the kernels of a patched tree on this accelerator.

Only ``measure``, ``prefill``, ``timing`` and ``decode_inputs`` import torch, and only
when ``tune`` runs; the rest (shapes, the tuning file) is plain Python so the CLI stays
importable without torch.
"""
