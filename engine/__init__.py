"""servesim's NumPy inference engine (placeholder while the package grows)."""
