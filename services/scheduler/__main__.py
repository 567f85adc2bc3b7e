"""``python -m services.scheduler``: run the scheduler as a faust worker (quiet, loopback only)."""
import sys

from services.scheduler.app import app, prepare

if __name__ == "__main__":
    prepare()
    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web", *sys.argv[1:]]
    app.main()
