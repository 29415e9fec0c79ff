"""Nothing to set up: pytest's default (prepend) import mode puts this directory on
the import path before it imports a test module here, so tests import their helpers
(``treeutil``) by plain name, and ``vllm_codemod`` comes from the editable install."""
