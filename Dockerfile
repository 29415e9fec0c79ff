# Patch the vendor's vLLM image in place with vllm-codemod.
#
#   docker build --build-arg BASE_IMAGE=<vendor vLLM image> -t vllm-bi-v100-patched .
#
# BASE_IMAGE: the vendor's vLLM image.  Iluvatar ships CoreX images as tarballs
# (`docker load -i ...`), not from a public registry, so the default is a local
# placeholder: tag the loaded image as localhost/corex-vllm:bi-v100 or pass
# --build-arg BASE_IMAGE=... .  The image must have python3 with pip and vllm installed.
ARG BASE_IMAGE=localhost/corex-vllm:bi-v100
FROM ${BASE_IMAGE}

# Optional: a run config YAML already in the image, retuned with `tune-config` when set.
ARG RUN_CONFIG=""

# Install the tool from the build context: a bind mount (rw: pip builds in-tree, the
# writes are discarded) leaves no source in any layer.  Dependencies come from the
# image's package index; vllm-codemod itself is never fetched.
RUN --mount=type=bind,source=.,target=/tmp/vllm-codemod,rw \
    python3 -m pip install --no-cache-dir --disable-pip-version-check /tmp/vllm-codemod

# Patch the image's own vllm (located without importing it), fail the build if
# anything is still pending or conflicting, then run the patched tree's kernels
# against a float64 reference.  Triton's cache (GPU builders only) is not kept.
RUN export TRITON_CACHE_DIR=/tmp/vllm-codemod-triton \
    && vllm-codemod apply \
    && vllm-codemod check \
    && vllm-codemod verify \
    && if [ -n "${RUN_CONFIG}" ]; then vllm-codemod tune-config "${RUN_CONFIG}"; fi \
    && rm -rf /tmp/vllm-codemod-triton
