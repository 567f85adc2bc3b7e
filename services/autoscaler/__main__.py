from services.autoscaler.app import main

main()
