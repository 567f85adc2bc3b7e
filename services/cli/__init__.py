"""``meridian``: the command line a user drives Meridian with (`services.cli.main`)."""
