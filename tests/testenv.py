"""The test environment, applied before pytest-django reads Django's settings.

Loaded as a plugin (``-p tests.testenv`` in pyproject's addopts), so it runs before any hook: pytest-django
sets Django up before it imports the test folders' conftest files, so a conftest that sets the environment
comes too late for the test process itself (its settings kept the default queue ``training`` and Redis
database 0, the ones ``make demo`` uses, while the workers and daphne the tests start got the test ones).
"""

from tests.platform.support import use_test_environment

use_test_environment()
