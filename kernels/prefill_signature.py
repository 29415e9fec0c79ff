"""The parameters of ``context_attention_fwd`` across vLLM 0.4.3 - 0.11.0.

Imports nothing: the codemod tool loads this file (without torch) to check that a
fork's signature can be forwarded to the bundled entry point, and the entry point binds
positional calls with the same orders.
"""

_HEAD = ("q", "k", "v", "o")
#: 0.4.x: no cache dtype or scales; ``b_ctx_len`` holds the cached tokens per sequence.
ORDER_0_4 = (*_HEAD, "k_cache", "v_cache", "b_loc", "b_start_loc", "b_seq_len", "b_ctx_len",
             "max_input_len", "alibi_slopes", "sliding_window")  # fmt: skip
#: 0.7 (0.5-0.6 is the same without ``sm_scale``, with float scales).
ORDER_0_7 = (*_HEAD, "kv_cache_dtype", "k_cache", "v_cache", "b_loc", "b_start_loc",
             "b_seq_len", "b_ctx_len", "max_input_len", "k_scale", "v_scale", "alibi_slopes",
             "sliding_window", "sm_scale")  # fmt: skip
#: 0.10.1 (0.8-0.9 is the same without ``sinks``): the cached count is now derived,
#: ``b_seq_len - (b_start_loc[i + 1] - b_start_loc[i])``.
ORDER_0_10 = (*_HEAD, "kv_cache_dtype", "k_cache", "v_cache", "b_loc", "b_start_loc",
              "b_seq_len", "max_seq_len", "max_input_len", "k_scale", "v_scale",
              "alibi_slopes", "sliding_window", "sm_scale", "skip_decode", "sinks")  # fmt: skip
#: 0.11: ``fp8_out_scale`` before ``sinks``.
ORDER_0_11 = (*ORDER_0_10[:-1], "fp8_out_scale", "sinks")
ORDERS = (ORDER_0_4, ORDER_0_7, ORDER_0_10, ORDER_0_11)

#: Every parameter name of every release: what the codemod may pass by name.
PARAMETERS = frozenset(ORDER_0_4 + ORDER_0_7 + ORDER_0_11)
#: Present in every release; a call without one of them is not one we can read.
REQUIRED = frozenset(
    ("q", "k", "v", "o", "k_cache", "v_cache", "b_loc", "b_start_loc", "b_seq_len",
     "max_input_len")
)  # fmt: skip
#: Exactly one of these says how the cached count is given (up to 0.7 / from 0.8).
CONTEXT_SPELLINGS = ("b_ctx_len", "max_seq_len")
