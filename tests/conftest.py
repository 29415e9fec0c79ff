"""Nothing to set up: pytest's default (prepend) import mode puts this directory on
the import path before it imports a test module here, so tests import their helpers
(``treeutil``) by plain name, and ``vllm_codemod`` comes from the editable install."""

import os  # noqa: E402

# The verdict cache (engine/verdict_cache.py) stays off in tests: tests swap transforms'
# behaviour and bundles in ways its key cannot see; tests/test_verdict_cache.py turns it on.
os.environ["VLLM_CODEMOD_CACHE_DIR"] = ""
