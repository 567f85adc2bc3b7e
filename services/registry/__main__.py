from services.log import configure_logging
from services.registry.app import main

if __name__ == "__main__":
    configure_logging()
    main()
