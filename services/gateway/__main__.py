from services.gateway.app import main
from services.log import configure_logging

if __name__ == "__main__":
    configure_logging()
    main()
