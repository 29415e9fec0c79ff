"""The parameter names of ``paged_attention_v2`` across vLLM 0.4.3 - 0.11.0.

Imports nothing: the codemod tool loads this file in environments without torch to
check that every parameter of a fork's stub can be passed to the bundled kernel by name.
"""

CANONICAL_PARAMETERS = (
    "out",
    "exp_sums",
    "max_logits",
    "tmp_out",
    "query",
    "key_cache",
    "value_cache",
    "num_kv_heads",
    "scale",
    "block_tables",
    "seq_lens",
    "block_size",
    "max_seq_len",
    "alibi_slopes",
    "kv_cache_dtype",
    "k_scale",
    "v_scale",
    "tp_rank",
    "blocksparse_local_blocks",
    "blocksparse_vert_stride",
    "blocksparse_block_size",
    "blocksparse_head_sliding_step",
)

# Older spellings -> canonical name.  ``kv_scale`` (vLLM 0.4.x) is one scale for both
# caches: the entry point applies it to ``k_scale`` AND ``v_scale``.
ALIASES = {
    "exp_sum": "exp_sums",
    "context_lens": "seq_lens",
    "max_context_len": "max_seq_len",
    "kv_scale": "k_scale",
}

ACCEPTED_PARAMETERS = frozenset(CANONICAL_PARAMETERS) | frozenset(ALIASES)

PARTITION_SIZE = 512
