"""Pure, I/O-free decision policies shared by the live services and the simulator."""
