"""``python -m services.scheduler``: run the scheduler as a faust worker (quiet, loopback only)."""
import gc
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
    # what was built to start (~150,000 objects: the imports, faust, the catalogue) lives as long as the
    # process: left out of the collector's full passes, which took ~90 ms of the event loop each under load
    gc.collect()
    gc.freeze()
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web", *sys.argv[1:]]
    try:
        app.main()
    finally:  # a stop, not a crash (a SIGKILL comes back under the same name and takes its partitions back)
        leave_group(settings)
