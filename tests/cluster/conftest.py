from tests.platform.support import use_test_environment

use_test_environment()

from tests.platform.fixtures import *  # noqa: E402,F403
