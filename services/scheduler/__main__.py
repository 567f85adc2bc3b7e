"""``python -m services.scheduler``: run the scheduler as a faust worker (quiet, loopback only)."""
import sys

from services.log import configure_logging
from services.scheduler.app import build_app
from services.scheduler.setup import leave_group, prepare
from shared.settings import Settings

if __name__ == "__main__":
    configure_logging()
    settings = Settings()
    prepare(settings)
    app = build_app(settings)
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web", *sys.argv[1:]]
    try:
        app.main()
    finally:  # a stop, not a crash (a SIGKILL comes back under the same name and takes its partitions back)
        leave_group(settings)
