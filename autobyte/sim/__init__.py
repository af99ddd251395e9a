"""autobyte.sim."""
