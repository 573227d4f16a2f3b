"""Machine tuning: the thread governor and the machine's own load."""
