# Imported at start-up by the Python processes that tests start (tests/conftest.py puts this
# folder first on their PYTHONPATH): what they start that makes a test slow is logged for that
# test (slowguard.LOG_VAR names the log; other processes pay one environment look-up).
import os

if os.environ.get("PICORING_SLOW_GUARD_LOG"):
    import slowguard

    slowguard.log_to_file()
