# Patch the vendor's vLLM image in place with vllm-codemod.
#
#   docker build --build-arg BASE_IMAGE=<vendor vLLM image> -t vllm-bi-v100-patched .
#
# BASE_IMAGE: the vendor's vLLM image.  Iluvatar ships CoreX images as tarballs
# (`docker load -i ...`), not from a public registry, so the default is a local
# placeholder: tag the loaded image as localhost/corex-vllm:bi-v100 or pass
# --build-arg BASE_IMAGE=... .  The image must have python3 with pip and vllm installed
# (Python 3.8 or newer).
#
# Build arguments (all optional):
#   VLLM_CODEMOD_ARGS  options for `vllm-codemod apply` and the `check` after it: those
#                      both take (--only, --skip, --force, --num-warps, --v2-threshold),
#                      e.g. "--num-warps 8" or "--skip prefix-prefill-warps --v2-threshold 4096"
#   VLLM_CODEMOD_APPLY_ARGS  options for `apply` only, e.g. "--discard-local-changes"
#   VLLM_CODEMOD_CHECK_ARGS  options for `check` only (both `check` steps)
#   VLLM_CODEMOD_TUNING  the name of a tuning file (from `vllm-codemod tune`, run on the
#                      target accelerator) in the build context "tuning"; it is copied to
#                      /usr/local/share/vllm-codemod/tuning.json and passed to `apply` as
#                      --tuning (the build fails if it is not there); see below
#   RUN_CONFIG         a run config YAML already in the image, retuned with `tune-config`
#   TUNE_CONFIG_ARGS   options for `tune-config`, e.g. "--set gpu-memory-utilization=0.9"
#   VLLM_VERSION       the base image's vLLM version, for the image label; when given,
#                      the build fails unless the patched tree reports exactly this
#   PIP_INDEX_URL      the package index for the tool's dependencies (a mirror); pip
#                      reads it, and PIP_TRUSTED_HOST, from the environment
#   VLLM_CODEMOD_VERSION  the tool's version for the image label; the build fails if
#                      the installed tool is another one (tests keep the default current)
#
# Air-gapped build hosts: put wheels of the tool's dependencies, and of setuptools, for
# the image's Python in a directory and pass it as the build context "wheelhouse";
# pip then installs from there only (PIP_NO_INDEX, PIP_FIND_LINKS).  Made on a host with network:
#   docker run --rm -v "$PWD:/src" -w /src <vendor image> \
#       python3 -m pip download -d wheelhouse . setuptools
#   docker build --build-context wheelhouse=./wheelhouse ... .
#
# A tuning file: measure on the target (`vllm-codemod tune` with the image's python and
# the GPU it will serve on), put the file in a directory, and pass that directory as the
# build context "tuning" and the file's name as VLLM_CODEMOD_TUNING:
#   vllm-codemod tune --model-config /models/m --output tuning/h200.json     # on the target
#   docker build --build-context tuning=./tuning \
#       --build-arg VLLM_CODEMOD_TUNING=h200.json ... .

# An empty wheelhouse unless --build-context wheelhouse=DIR replaces this stage.
FROM scratch AS wheelhouse

# No tuning file unless --build-context tuning=DIR replaces this stage.
FROM scratch AS tuning

ARG BASE_IMAGE=localhost/corex-vllm:bi-v100
FROM ${BASE_IMAGE}

ARG VLLM_CODEMOD_VERSION=0.1.0
ARG VLLM_CODEMOD_ARGS=""
ARG VLLM_CODEMOD_APPLY_ARGS=""
ARG VLLM_CODEMOD_CHECK_ARGS=""
ARG VLLM_CODEMOD_TUNING=""
ARG RUN_CONFIG=""
ARG TUNE_CONFIG_ARGS=""
ARG VLLM_VERSION=""
ARG PIP_INDEX_URL
ARG PIP_TRUSTED_HOST

LABEL org.opencontainers.image.title="vLLM patched by vllm-codemod" \
      org.opencontainers.image.description="vLLM ${VLLM_VERSION} patched by vllm-codemod ${VLLM_CODEMOD_VERSION}" \
      org.opencontainers.image.version="${VLLM_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      vllm-codemod.version="${VLLM_CODEMOD_VERSION}" \
      vllm-codemod.vllm-version="${VLLM_VERSION}"

# Install the tool from the build context: a bind mount (rw: pip builds in-tree, the
# writes are discarded) leaves no source in any layer.  Its dependencies come from the
# wheelhouse when one is given, else from the image's package index (or PIP_INDEX_URL);
# vllm-codemod itself is never fetched.  Then check that the label tells the truth.
RUN --mount=type=bind,source=.,target=/tmp/vllm-codemod,rw \
    --mount=type=bind,from=wheelhouse,target=/tmp/wheelhouse \
    if ls /tmp/wheelhouse/*.whl >/dev/null 2>&1; then \
        export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/wheelhouse; fi \
    && python3 -m pip install --no-cache-dir --disable-pip-version-check /tmp/vllm-codemod \
    && installed="$(python3 -c 'import vllm_codemod; print(vllm_codemod.__version__)')" \
    && if [ "$installed" != "${VLLM_CODEMOD_VERSION}" ]; then \
        echo "vllm-codemod: error: installed $installed but VLLM_CODEMOD_VERSION (the image label) is ${VLLM_CODEMOD_VERSION}; pass --build-arg VLLM_CODEMOD_VERSION=$installed" >&2; \
        exit 2; fi

# Patch the image's own vllm (located without importing it), with the tuning file if
# one was given (kept in the image beside check.json), fail the build if anything is
# still pending or conflicting, record what was patched, then run the patched tree's
# kernels against a float64 reference: a mismatch fails the build with verify's
# one-line reason.  Triton's cache (GPU builders only) is not kept.
# hadolint ignore=SC2086
RUN --mount=type=bind,from=tuning,target=/tmp/tuning-context \
    export TRITON_CACHE_DIR=/tmp/vllm-codemod-triton \
    && mkdir -p /usr/local/share/vllm-codemod \
    && tuning="" \
    && if [ -n "${VLLM_CODEMOD_TUNING}" ]; then \
        if [ ! -f "/tmp/tuning-context/${VLLM_CODEMOD_TUNING}" ]; then \
            echo "vllm-codemod: error: VLLM_CODEMOD_TUNING=${VLLM_CODEMOD_TUNING}: no such file in the build context tuning; pass --build-context tuning=DIR, DIR holding the file that vllm-codemod tune wrote" >&2; \
            exit 2; fi \
        && cp "/tmp/tuning-context/${VLLM_CODEMOD_TUNING}" /usr/local/share/vllm-codemod/tuning.json \
        && tuning="--tuning /usr/local/share/vllm-codemod/tuning.json"; fi \
    && vllm-codemod apply ${VLLM_CODEMOD_ARGS} ${VLLM_CODEMOD_APPLY_ARGS} $tuning \
    && vllm-codemod check ${VLLM_CODEMOD_ARGS} ${VLLM_CODEMOD_CHECK_ARGS} \
    && vllm-codemod check --json ${VLLM_CODEMOD_ARGS} ${VLLM_CODEMOD_CHECK_ARGS} \
        > /usr/local/share/vllm-codemod/check.json \
    && patched="$(python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])' \
        < /usr/local/share/vllm-codemod/check.json)" \
    && if [ -n "${VLLM_VERSION}" ] && [ "$patched" != "${VLLM_VERSION}" ]; then \
        echo "vllm-codemod: error: the image has vLLM $patched but VLLM_VERSION (the image label) is ${VLLM_VERSION}" >&2; \
        exit 2; fi \
    && vllm-codemod verify \
    && if [ -n "${RUN_CONFIG}" ]; then \
        vllm-codemod tune-config ${TUNE_CONFIG_ARGS} "${RUN_CONFIG}"; fi \
    && rm -rf /tmp/vllm-codemod-triton
