from services.autoscaler.app import main
from services.log import configure_logging

configure_logging()
main()
