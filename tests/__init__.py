"""The test tree is one package: pytest imports every module under a folder with an ``__init__.py`` by its full name
from the repository root (``tests.operator.unit.test_spec``, ``tests.e2e.local.apiserver``), so ``tests/`` itself never
goes onto ``sys.path`` and a folder named like a standard-library module (``tests/operator``, mirroring the code in
``operator/``) is never imported as that module (``tests/operator/test_no_shadowing.py`` checks it)."""
