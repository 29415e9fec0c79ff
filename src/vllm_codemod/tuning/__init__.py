"""``vllm-codemod tune``: measure the kernels of a patched tree on this accelerator.

Only ``measure``, ``prefill``, ``timing``, ``decode_inputs`` and
``vendor_v1`` import torch, and only when ``tune`` runs; the rest (shapes, the tuning
file) is plain Python so the CLI stays importable without torch.
"""
